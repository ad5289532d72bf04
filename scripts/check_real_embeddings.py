"""An embeddings capacity run against a real server: llama.cpp's, in its `--embedding` mode.

    python scripts/check_real_embeddings.py --server-python PY --gguf MODEL.gguf [--out DIR]

Not in `make test`: building llama.cpp (llama-cpp-python[server], from source) takes ~6 minutes
on 2 cores, longer than the suite may grow. PY is a Python with it installed; MODEL.gguf any GGUF
model (scripts/make_tiny_llama.py makes a tiny one offline). The script starts
`python -m llama_cpp.server --embedding true` on a free loopback port, checks that one answer
holds a vector per text, runs `capacity run` of an embeddings sweep against it (dialect
openai-embeddings: `/v1/embeddings`, a batch of texts per request), and checks what a real server
must give: every request answered, no record lost, and an analysis that decides the capacity in
items/s. Prints the plain answer and the per-step items/s; exit 0 when all holds, 1 when not (the
reason on one line).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from capacity_plugins.contracts.meta import META_FILE, Meta  # noqa: E402 - after sys.path names this checkout
from capacity_plugins.contracts.summary import Summary, load_summary  # noqa: E402

BATCH = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, server: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
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


def one_answer(url: str) -> str | None:
    """One request of BATCH texts by hand: the answer must hold one non-empty vector per text (the
    dialect checks an answer is a list of items, not how many). None when it does, else why not."""
    body = json.dumps({"model": "tiny", "input": [f"{i}: a text to embed" for i in range(BATCH)]}).encode()
    req = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        doc = json.loads(r.read())
    data = doc.get("data") or []
    if len(data) != BATCH or not all(isinstance(d.get("embedding"), list) and d["embedding"] for d in data):
        return f"{len(data)} vectors for {BATCH} texts: {str(doc)[:200]}"
    return None


def scenario(url: str, out: Path) -> Path:
    path = out / "embeddings-llamacpp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "embeddings-llamacpp", "output": str(out / "results"),
        "target": {"url": url, "dialect": "openai-embeddings", "model": "tiny"},
        "corpus": {"path": "synthetic:prompt_tokens=64,n=2000,seed=1", "min_distinct": 1000},
        "request": {"stream": False, "batch_size": BATCH, "timeout_s": 60},
        # llama.cpp's server answers one request at a time: the knee is at one user
        "load": {"kind": "concurrency_sweep", "levels": [1, 2, 4], "step_s": 12, "warmup_s": 2,
                 "min_requests": 10},
        "slo": {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000},
    }, sort_keys=False))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", required=True, help="a Python with llama-cpp-python[server] installed")
    ap.add_argument("--gguf", required=True, help="the GGUF model the server loads")
    ap.add_argument("--out", help="where the scenario and results go (default: a new temporary folder)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="capacity-real-embeddings-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (out / "server.log").open("wb")
    server = subprocess.Popen(
        [args.server_python, "-m", "llama_cpp.server", "--model", args.gguf, "--model_alias", "tiny",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "1",
         "--embedding", "true", "--interrupt_requests", "False"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, server)
        print(f"check: llama.cpp server ready at {url} (log: {out / 'server.log'})", flush=True)
        wrong = one_answer(url)
        if wrong is not None:
            print(f"check: FAILED: {wrong}")
            return 1
        run = subprocess.run([sys.executable, "-m", "capacity_plugins", "run", str(scenario(url, out)),
                              "--history", "off"], cwd=ROOT, text=True, capture_output=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    folders = sorted((out / "results").glob("embeddings-llamacpp-*"))
    if not folders or not (folders[-1] / "summary.json").exists():
        print(run.stdout[-3000:] + run.stderr[-3000:])
        print(f"check: FAILED: capacity run exited {run.returncode} without an analysed folder")
        return 1
    folder = folders[-1]
    summary = load_summary(folder)
    assert isinstance(summary, Summary)  # one run, not a repeat set
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    print(summary.answer)
    for step in summary.item_rates.steps if summary.item_rates is not None else []:
        print(f"  {step.level:g} users: {step.items_per_s} items/s (interval {step.items_per_s_ci}), "
              f"input tokens/s {step.input_tokens_per_s}")
    failed = [r for r in records if not r["ok"]]
    problems = []
    if failed:
        problems.append(f"{len(failed)} of {len(records)} requests failed (first: {failed[0].get('error')})")
    if summary.capacity.per_node_rps is None:
        problems.append(f"no capacity: {summary.capacity.unknown_reason}")
    meta = Meta.from_json(json.loads((folder / META_FILE).read_text()), META_FILE)
    lost = meta.records.lost if meta.records is not None else None
    if lost:
        problems.append(f"{lost} records lost")
    if problems:
        print("check: FAILED: " + "; ".join(problems))
        return 1
    print(f"check: ok: {len(records)} requests of {BATCH} texts, all answered; results: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
