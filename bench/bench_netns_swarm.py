"""16 workers, each in its own network namespace, one master in another, the simulator on the
host side of the bridge (tests/helpers/netns.py): a few minutes of load, then what it cost.

Reports: records complete (per worker, produced = received, every one with its final batch),
the master's CPU per record (its Locust process's CPU seconds / records received), its RSS and
loop lag over the run (first third against last third: flat or growing), and from them how many
workers one master core carries at this per-worker record rate. Needs root (`ip netns`); prints
why and exits 0 where it is not.

    .venv/bin/python bench/bench_netns_swarm.py [--workers 16] [--step-s 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
CAPACITY = [sys.executable, "-m", "capacity_plugins"]
PORT = 5557


def _locust_child(pid: int) -> psutil.Process | None:
    try:
        for c in psutil.Process(pid).children(recursive=True):
            if "locust" in " ".join(c.cmdline()):
                return c
    except psutil.Error:
        return None
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--step-s", type=float, default=60.0)
    args = ap.parse_args(_own_args(sys.argv[1:]))
    if os.geteuid() != 0:
        print("netns swarm: skipped (network namespaces need root)")
        return 0
    from helpers.netns import Network

    n = args.workers
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="capacity-netns-bench-") as tmp, Network("bench") as net:
        folder = Path(tmp)
        sim = subprocess.Popen([*CAPACITY, "simulate", "--host", net.gateway, "--port", "8000",
                                "--max-num-seqs", "256"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        sc = folder / "s.yaml"
        # one user per worker, then two: a steady trickle from every worker, as a big swarm has
        sc.write_text(yaml.safe_dump({
            "name": "netns-bench", "output": str(folder / "results"),
            "target": {"url": f"http://{net.gateway}:8000", "model": "sim-model"},
            "corpus": {"min_distinct": 100},
            "request": {"max_tokens": 32, "timeout_s": 60},
            "load": {"levels": [n, 2 * n, 2 * n], "step_s": args.step_s, "warmup_s": 5, "min_requests": 20},
        }))
        mhost = net.host("master")
        procs = []
        master = subprocess.Popen(mhost.argv([*CAPACITY, "run", str(sc), "--master", "--expect-workers", str(n),
                                              "--bind", "0.0.0.0", "--master-bind-port", str(PORT), "--no-analyze"]),
                                  cwd=ROOT, env=env, stdout=(folder / "master.log").open("w"), stderr=subprocess.STDOUT)
        procs.append(master)
        try:
            time.sleep(2)
            for i in range(n):
                h = net.host(f"w{i}")
                procs.append(subprocess.Popen(
                    h.argv([*CAPACITY, "run", str(sc), "--worker", "--master-host", mhost.ip, "--master-port", str(PORT)]),
                    cwd=ROOT, env=env, stdout=(folder / f"w{i}.log").open("w"), stderr=subprocess.STDOUT))
            child = None
            samples: list[tuple[float, float, int]] = []  # (unix, cpu seconds, rss)
            while master.poll() is None:
                time.sleep(2)
                child = child or _locust_child(master.pid)
                if child is not None:
                    try:
                        t = child.cpu_times()
                        samples.append((time.time(), t.user + t.system, child.memory_info().rss))
                    except psutil.Error:
                        pass
            rcs = [p.wait(60) for p in procs[1:]]
        finally:
            for p in (*procs, sim):
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        log = (folder / "master.log").read_text()
        run = next((p for p in (folder / "results").iterdir() if p.is_dir()), None)
        if run is None or not (run / "meta.json").exists():
            print(f"netns swarm: no results; master rc {master.returncode}:\n{log[-2000:]}")
            return 0
        meta = json.loads((run / "meta.json").read_text())
        steps = json.loads((run / "steps.json").read_text())["steps"]
        by_worker = meta["records"]["by_worker"]
        complete = all(e["final_batch"] and e["produced_reported"] == e["received"] for e in by_worker.values())
        received = sum(e["received"] for e in by_worker.values())
        span = samples[-1][0] - samples[0][0] if len(samples) > 1 else 0.0
        cpu = samples[-1][1] - samples[0][1] if len(samples) > 1 else 0.0
        third = max(len(samples) // 3, 1)
        rss_first = max(s[2] for s in samples[:third]) / 2**20
        rss_last = max(s[2] for s in samples[-third:]) / 2**20
        lags = [s["master_loop_lag_p99_ms"] for s in steps if s.get("master_loop_lag_p99_ms") is not None]
        rate = received / span if span else 0.0
        core_share = cpu / span if span else 0.0
        per_record_us = 1e6 * cpu / received if received else float("nan")
        carried = n / core_share if core_share else float("inf")
        print(f"netns swarm: {n} workers (own namespaces), master rc {master.returncode}, workers rc "
              f"{sorted(set(rcs))}, lost {len(meta.get('workers_lost') or [])}, steps {len(steps)} "
              f"(flagged {sum(1 for s in steps if s['membership_changed'] or s['client_limited'])})")
        print(f"  records: {received} received over {span:.0f} s ({rate:.0f}/s), per worker produced = received "
              f"with final batch: {complete}; lost {meta['records']['lost']}")
        print(f"  master CPU: {core_share * 100:.1f} % of a core, {per_record_us:.0f} us per record "
              f"(all its work: records, watches, heartbeats, clock pings)")
        print(f"  master RSS: {rss_first:.0f} MiB (first third) → {rss_last:.0f} MiB (last third); "
              f"loop lag p99 per step: {', '.join(f'{x:.1f}' for x in lags)} ms "
              f"(median {statistics.median(lags) if lags else float('nan'):.1f})")
        print(f"  one master core carries ~{carried:.0f} workers at {rate / n:.1f} records/s each "
              f"(~{1e6 / per_record_us:.0f} records/s in all)" if received else "  no records")
        offsets = meta.get("clock", {}).get("offsets", {})
        if offsets:
            unc = [o["uncertainty_s"] * 1000 for o in offsets.values()]
            print(f"  clock offsets measured for {len(offsets)} workers, uncertainty max {max(unc):.1f} ms")
    return 0


def _own_args(argv: list[str]) -> list[str]:
    """run_all.py passes its own arguments to every bench: keep only ours."""
    out, keep = [], False
    for a in argv:
        if a.split("=")[0] in ("--workers", "--step-s"):
            out.append(a)
            keep = "=" not in a
        elif keep:
            out.append(a)
            keep = False
    return out


if __name__ == "__main__":
    sys.exit(main())
