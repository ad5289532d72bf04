#!/usr/bin/env python3
"""Regenerate the LLM tab's screenshots in docs/img/ (docs/webui.md shows them).

Starts the embedded simulator and a Locust web UI with a 5-level concurrency sweep (telemetry
scraped from the simulator), opens the LLM tab in headless Chromium, and writes:

- `llm_tab.png`: mid-run, once two steps have finished (the curve forming, the provisional knee
  and capacity, the running step's row);
- `llm_tab_answer.png`: after the sweep, once the analysis wrote the plain answer.

Needs chromium (scripts/ensure_system_deps.sh) and playwright (the dev extras). About 1.5 minutes.

    .venv/bin/python scripts/webui_screenshots.py [--out docs/img] [--workers 2] [--base-path /locust] [--rate] [--dark]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capacity_plugins.simulator.config import SimConfig  # noqa: E402
from capacity_plugins.simulator.launch import SimulatorProcess  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# 4 batch slots: throughput flattens after 4 users, TTFT climbs at 8 and 16 (requests queue).
SIMULATOR = {"max_num_seqs": 4, "decode_base_ms": 6.0, "decode_per_seq_ms": 2.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scenario(folder: Path, url: str, rate: bool = False) -> Path:
    data = {
        "name": "webui-screenshots",
        "target": {"url": url, "model": "sim-model"},
        "corpus": {"path": "synthetic:prompt_tokens=40,output_tokens=16,n=1500", "min_distinct": 10},
        "request": {"max_tokens": 16, "timeout_s": 10},
        "load": {"kind": "concurrency_sweep", "levels": [1, 2, 4, 8, 16], "step_s": 6, "warmup_s": 1,
                 "min_requests": 30},
        "slo": {"ttft_p95_ms": 150, "tpot_p95_ms": 50},
        **({"load": {"kind": "rate_sweep", "levels": [5, 10, 20, 40], "step_s": 6, "warmup_s": 1, "min_requests": 30,
                     "max_concurrency": 64}} if rate else {}),
        "capacity": {"peak_qps": 60, "current_nodes": 2},
        "telemetry": {"scrape": [{"url": url + "/metrics", "kind": "simulator"}], "interval_s": 1},
        "output": str(folder / "results"),
    }
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def wait(what: str, check, timeout_s: float, proc: subprocess.Popen) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"locust exited ({proc.returncode}) while waiting for {what}")
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--workers", type=int, default=0, help="master + N workers (0: one local process)")
    ap.add_argument("--base-path", default="", help="--web-base-path, e.g. /locust")
    ap.add_argument("--rate", action="store_true", help="an open-loop rate sweep instead of the concurrency sweep")
    ap.add_argument("--dark", action="store_true", help="the browser prefers a dark colour scheme (Locust follows it)")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium not found: scripts/ensure_system_deps.sh installs it")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="webui-shots-") as tmp, SimulatorProcess(SimConfig(**SIMULATOR)) as sim:
        folder = Path(tmp)
        sc = scenario(folder, sim.url, args.rate)
        port = free_port()
        locust = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py")]
        cmd = [*locust, "--scenario", str(sc), "--web-host", "127.0.0.1", "--web-port", str(port),
               "--autostart", "--autoquit", "120"]
        if args.base_path:
            cmd += ["--web-base-path", args.base_path]
        procs: list[subprocess.Popen] = []
        if args.workers:
            mport = free_port()
            cmd += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(mport),
                    "--expect-workers", str(args.workers)]
        log = (folder / "locust.log").open("w")
        master = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        procs.append(master)
        for _ in range(args.workers):
            procs.append(subprocess.Popen([*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(mport)],
                                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        base = f"http://127.0.0.1:{port}{args.base_path}"
        try:
            wait("the web UI", lambda: get_json(f"{base}/llm/live"), 60, master)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1500, "height": 1000},
                                        color_scheme="dark" if args.dark else "light")
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.goto(base + "/")
                page.get_by_role("tab", name="LLM").click(timeout=60_000)

                def finished(n: int):
                    doc = get_json(f"{base}/llm/live") or {}
                    return sum(1 for s in doc.get("steps", []) if s["state"] == "finished") >= n

                wait("two finished steps", lambda: finished(2), 120, master)
                time.sleep(3)  # two refreshes of the tab
                page.screenshot(path=str(out / "llm_tab.png"), full_page=True)
                wait("the answer", lambda: ((get_json(f"{base}/llm/live") or {}).get("answer") or {}).get("answer"),
                     180, master)
                page.wait_for_selector('[data-answer="final"]', timeout=15_000)
                time.sleep(2.5)
                page.screenshot(path=str(out / "llm_tab_answer.png"), full_page=True)
                browser.close()
            if errors:
                print("console errors:", *errors, sep="\n  ")
                return 1
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
            log.close()
    print(f"wrote {out / 'llm_tab.png'} and {out / 'llm_tab_answer.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
