"""What the checks against real servers share (scripts/check_real_*.py): a loopback port, a server
process started and awaited, a `capacity run` of a scenario, and the checks every such run must
pass (every request answered, no record lost, the capacity decided)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from capacity_plugins.contracts.meta import META_FILE, Meta  # noqa: E402 - after sys.path names this checkout
from capacity_plugins.contracts.summary import Summary, load_summary  # noqa: E402

# vLLM for CPU, offline: the KV cache it may take, no hub, no usage reports; VLLM_TARGET_DEVICE
# because an environment with PyPI's CUDA build of torch (for torchvision, images) would guess CUDA.
VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def parser(doc: str, server_help: str) -> argparse.ArgumentParser:
    """The arguments every check takes: the server's Python and where the results go."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--server-python", required=True, help=server_help)
    ap.add_argument("--out", help="where the scenarios and results go (default: a new temporary folder)")
    return ap


def out_folder(given: str | None, prefix: str) -> Path:
    out = Path(given or tempfile.mkdtemp(prefix=prefix))
    out.mkdir(parents=True, exist_ok=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)


def start_vllm(python: str, model: str, name: str, port: int, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """vLLM's OpenAI server on loopback (the module, not the `vllm` script: vllm-cpu's distribution is
    not named `vllm`, and the script dies looking it up)."""
    return start([python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", name,
                  "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096", *flags],
                 log, env={**os.environ, **VLLM_ENV})


def wait_ready(url: str, server: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """Until GET url/v1/models answers 200; a server that exits first, or never answers, ends the check."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if server.poll() is not None:
            raise SystemExit(f"check: the server exited with code {server.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"check: {url} not ready after {timeout_s:.0f} s")


def stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def post(url: str, body: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def get(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def write_scenario(out: Path, doc: dict[str, Any]) -> Path:
    path = out / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Run:
    """One analysed `capacity run` folder: its summary, records and meta, and what a real server's
    run must not show (`problems`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        summary = load_summary(folder)
        assert isinstance(summary, Summary)  # one run, not a repeat set
        self.summary = summary
        self.records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
        self.meta = Meta.from_json(json.loads((folder / META_FILE).read_text()), META_FILE)

    def problems(self) -> list[str]:
        out = []
        failed = [r for r in self.records if not r["ok"]]
        if failed:
            out.append(f"{len(failed)} of {len(self.records)} requests failed (first: {failed[0].get('error')})")
        if self.summary.capacity.per_node_rps is None:
            out.append(f"no capacity: {self.summary.capacity.unknown_reason}")
        lost = self.meta.records.lost if self.meta.records is not None else None
        if lost:
            out.append(f"{lost} records lost")
        return out


def finish(problems: list[str], ok: str) -> int:
    """The check's last line and exit status: 1 with every problem on one line, else 0."""
    if problems:
        print("check: FAILED: " + "; ".join(problems))
        return 1
    print(f"check: ok: {ok}")
    return 0


def capacity_run(scenario: Path, results: Path, name: str) -> Run | str:
    """`capacity run` of the scenario (history off); its analysed folder, or why there is none."""
    run = subprocess.run([sys.executable, "-m", "capacity_plugins", "run", str(scenario), "--history", "off"],
                         cwd=ROOT, text=True, capture_output=True)
    folders = sorted(results.glob(f"{name}-*"))
    if not folders or not (folders[-1] / "summary.json").exists():
        return (f"capacity run exited {run.returncode} without an analysed folder; its output ends:\n"
                + run.stdout[-3000:] + run.stderr[-3000:])
    return Run(folders[-1])


def serve_and_run(server: subprocess.Popen[bytes], url: str, log: Path, scenario: Callable[[], Path], name: str,
                  check: Callable[[], str | None] = lambda: None, timeout_s: float = 120.0,
                  what: str = "the server") -> Run | str:
    """A check's one pass: wait until the started server answers, check one answer by hand (`check`:
    None when right, else why not), run the scenario against it, and stop the server whatever
    happened. The analysed run, or why there is none."""
    try:
        wait_ready(url, server, timeout_s)
        print(f"check: {what} ready at {url} (log: {log})", flush=True)
        wrong = check()
        if wrong is not None:
            return wrong
        path = scenario()
        return capacity_run(path, path.parent / "results", name)
    finally:
        stop(server)
