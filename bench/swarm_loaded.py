"""Master + 2 workers on one loaded host (two CPU burners on a 2-core box): a sweep completes with
no worker lost and every request recorded. Shared by the slow test (one run) and `make bench`
(five in a row, bench/bench_swarm.py)."""

from __future__ import annotations

import contextlib
import csv
import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CAPACITY = [sys.executable, "-m", "capacity_plugins"]


@dataclass
class SwarmRun:
    master_rc: int
    worker_rcs: list[int]
    workers_lost: list[dict[str, Any]]
    records: int  # lines of requests.jsonl
    finished: int  # records not cancelled by the stop
    locust_requests: int  # Locust's own count (Aggregated, locust_stats.csv)
    records_lost: Any  # meta.json records.lost
    steps: list[dict[str, Any]]
    log: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_loaded_swarm(folder: Path, burners: int = 2, levels: tuple[int, ...] = (2, 4, 8),
                     step_s: float = 4.0) -> SwarmRun:
    folder.mkdir(parents=True, exist_ok=True)
    scenario = folder / "swarm.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "swarm", "output": str(folder / "results"),
        "target": {"url": "embedded", "simulator": {"max_num_seqs": 8}},
        "corpus": {"min_distinct": 100},
        "request": {"max_tokens": 16, "timeout_s": 20},
        "load": {"levels": list(levels), "step_s": step_s, "warmup_s": 1, "min_requests": 20},
    }))
    port = _free_port()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        master = subprocess.Popen([*CAPACITY, "run", str(scenario), "--master", "--expect-workers", "2",
                                   "--master-bind-port", str(port), "--no-analyze"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # the workers' own logs stay next to the run: a lost worker's last lines say what held it up
        workers = [subprocess.Popen([*CAPACITY, "run", str(scenario), "--worker", "--master-port", str(port)],
                                    cwd=ROOT, stdout=(folder / f"worker-{i}.log").open("w"), stderr=subprocess.STDOUT)
                   for i in range(2)]
        try:
            log, _ = master.communicate(timeout=300)
            worker_rcs = [w.wait(timeout=60) for w in workers]
        finally:
            for proc in (master, *workers):
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
    finally:
        for h in hogs:
            h.kill()
    run = next(p for p in (folder / "results").iterdir() if p.is_dir())
    recs = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x.strip()]
    meta = json.loads((run / "meta.json").read_text())
    with (run / "locust_stats.csv").open() as f:
        agg = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    return SwarmRun(
        master_rc=master.returncode, worker_rcs=worker_rcs, workers_lost=meta.get("workers_lost") or [],
        records=len(recs), finished=sum(1 for r in recs if r["error_kind"] != "cancelled"),
        locust_requests=int(agg["Request Count"]), records_lost=(meta.get("records") or {}).get("lost"),
        steps=json.loads((run / "steps.json").read_text())["steps"], log=log,
    )
