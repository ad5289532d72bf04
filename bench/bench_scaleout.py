"""Scale-out: `--processes N` against one process, and what the master pays per record.

The C SSE server of bench_client (vLLM's chat stream, TOKENS tokens, as fast as it is read) on
core 0; plain Locust with the plugin (locustfiles/llm.py) against it, closed loop, first as one
process, then as a master with WORKERS worker processes on loopback (`--processes`). Each
process's CPU time over the measured window comes from psutil; the server counts the chunks.

A 2-core machine cannot show N cores, so what is printed is per process: chunks per CPU-second of
one process alone and of each worker, the master's CPU per record it receives (it only receives
record batches, writes requests.jsonl and keeps the live statistics), and that every record
arrived (meta.json accounting, every request complete). docs/benchmarks.md turns these into the
model for N cores:

    chunks/s(N) = min(N × worker chunks per CPU-s × share of a core each worker gets,
                      TOKENS / master CPU per record)

BENCH_SCALEOUT_WORKERS (default 4), BENCH_SCALEOUT_SECONDS (default 8).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from bench_client import TOKENS, Server, build_server

ROOT = Path(__file__).resolve().parent.parent
WORKERS = int(os.environ.get("BENCH_SCALEOUT_WORKERS", "4"))
SECONDS = float(os.environ.get("BENCH_SCALEOUT_SECONDS", "8"))
USERS_PER_PROCESS = 8
WARMUP_LIMIT_S = 20.0


def cpu(procs: list[psutil.Process]) -> list[float]:
    out = []
    for p in procs:
        try:
            t = p.cpu_times()
            out.append(t.user + t.system)
        except psutil.Error:
            out.append(float("nan"))
    return out


def warm_up(server: Server, limit_s: float) -> None:
    """Wait until two successive seconds of ingest agree within 15 %."""
    end = time.monotonic() + limit_s
    last = None
    prev = server.stats()
    while time.monotonic() < end:
        time.sleep(1.0)
        now = server.stats()
        rate = (now["chunks"] - prev["chunks"]) / max(now["mono_ns"] - prev["mono_ns"], 1)
        if last is not None and rate > 0 and abs(rate - last) <= 0.15 * max(rate, last):
            return
        last, prev = rate, now


def run_locust(server: Server, tmp: Path, processes: int) -> dict[str, Any]:
    corpus = tmp / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q {i}"}) + "\n" for i in range(200)))
    out = tmp / f"out-{processes}"
    users = USERS_PER_PROCESS * max(processes, 1)
    duration = WARMUP_LIMIT_S + SECONDS + 4
    argv = [str(Path(sys.executable).parent / "locust"), "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless",
            "-u", str(users), "-r", str(users), "-t", f"{duration:g}s", "--host", f"http://127.0.0.1:{server.port}",
            "--dialect", "openai-chat", "--model", "m", "--corpus", str(corpus), "--min-distinct", "1",
            "--max-tokens", str(TOKENS), "--results-dir", str(out), "--only-summary", "--stop-timeout", "5"]
    if processes:
        argv += ["--processes", str(processes)]
    errlog = tmp / f"locust-{processes}.err"
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=errlog.open("w"),
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    master = psutil.Process(proc.pid)
    warm_up(server, WARMUP_LIMIT_S)  # start, fork, connect, spawn: until the ingest rate is steady
    workers = master.children()
    a, ca, wa = server.stats(), cpu([master]), cpu(workers)
    time.sleep(SECONDS)
    b, cb, wb = server.stats(), cpu([master]), cpu(workers)
    try:
        proc.wait(timeout=duration + 60)  # Locust's own end (-t): the workers' last batches, meta.json
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # psutil refuses a pid reused since: only our own workers are ended
            with contextlib.suppress(psutil.Error):
                w.kill()
    err = errlog.read_text()
    run = next(p for p in out.iterdir() if p.is_dir()) if any(p.is_dir() for p in out.iterdir()) else out
    records = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x.strip()]
    meta = json.loads((run / "meta.json").read_text())
    finished = [r for r in records if r["error_kind"] != "cancelled"]
    complete = sum(1 for r in finished if r["ok"] and r["output_tokens"] == TOKENS and len(r["itl_ms"]) + 1 == TOKENS)
    wall = (b["mono_ns"] - a["mono_ns"]) / 1e9
    chunks = b["chunks"] - a["chunks"]
    window_records = b["requests"] - a["requests"]
    master_cpu = cb[0] - ca[0]
    worker_cpu = [y - x for x, y in zip(wa, wb, strict=True)]
    gen_cpu = sum(worker_cpu) if processes else master_cpu
    return {
        "processes": processes, "chunks_per_s": chunks / wall, "records_per_s": window_records / wall,
        "chunks_per_cpu_s": chunks / gen_cpu if gen_cpu > 0 else float("nan"),
        "worker_cores": [c / wall for c in worker_cpu], "master_core": master_cpu / wall,
        "master_ms_per_record": master_cpu / window_records * 1000 if processes and window_records else None,
        "records": len(records), "finished": len(finished), "complete": complete,
        "accounting": meta.get("records"), "rc": proc.returncode, "stderr": err[-500:] if proc.returncode else "",
        "server_cpu": (b["cpu_ns"] - a["cpu_ns"]) / 1e9 / wall,
    }


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench_scaleout_"))
    try:
        server = Server(build_server(tmp), TOKENS)
        try:
            one = run_locust(server, tmp, 0)
            many = run_locust(server, tmp, WORKERS)
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"plain Locust + plugin, {TOKENS}-token chat streams from the C server (core 0), {USERS_PER_PROCESS} users "
          f"per generating process, {SECONDS:g} s window, {os.cpu_count()} cores in all")
    for r in (one, many):
        name = "1 process" if not r["processes"] else f"master + {r['processes']} workers"
        cores = (f"workers {', '.join(f'{c:.0%}' for c in r['worker_cores'])} of a core, master {r['master_core']:.0%}"
                 if r["processes"] else f"{r['master_core']:.0%} of a core")
        print(f"  {name:<20} {r['chunks_per_s']:>9,.0f} chunks/s ({r['records_per_s']:,.0f} records/s), "
              f"{r['chunks_per_cpu_s']:>9,.0f} chunks per generator CPU-s; {cores}; server CPU {r['server_cpu']:.0%}")
        print(f"  {'':<20} records {r['records']} ({r['finished']} finished, {r['complete']} complete), "
              f"accounting {r['accounting']}, exit {r['rc']} {r['stderr']}")
    per_worker = many["chunks_per_cpu_s"]
    ms = many["master_ms_per_record"] or float("nan")
    print(f"  goal 4: one worker process {per_worker:,.0f} chunks per CPU-s ({per_worker / one['chunks_per_cpu_s']:.2f} x "
          f"the single process: the cost of shipping records); master {ms:.3f} ms CPU per record received "
          f"= {1000 / ms:,.0f} records/s = {TOKENS * 1000 / ms:,.0f} chunks/s of {TOKENS}-token requests per master "
          f"core; records complete: {many['complete'] == many['finished'] and (many['accounting'] or {}).get('lost') == 0}")
    for n in (1, 2, 4, 8, 16, 32):
        model = min(n * per_worker, TOKENS * 1000 / ms)
        print(f"    model, {n:>2} worker cores: {model:>12,.0f} chunks/s"
              + ("  (master-bound)" if n * per_worker > TOKENS * 1000 / ms else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
