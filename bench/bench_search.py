"""Capacity search against a fixed sweep as fine as the search's final bracket, both measured.

The embedded simulator with 16 batch slots and fixed 32-token outputs: up to 16 users no request
waits, beyond that a request waits for a whole other request, so a TTFT P95 limit between the
two regimes holds at 16 users and not at 17. Both runs use the same step length and thresholds:

- the search: from 1 user, ×2 until a miss, then bisection to a one-user bracket;
- the fixed sweep a user would need for the same answer without a search: every level from 1 to
  the first level the search saw fail while bracketing (one user apart, like the final bracket).

Prints both wall times, step counts and their ratio (goal: search ≤ 0.5 × the sweep). Steps need
100 measured requests: fewer can never show a 95 % attainment at 95 % confidence (72 with none
over the limit is the least), so the search would stop at "uncertain" on its first step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CAPACITY = [sys.executable, "-m", "capacity_plugins"]
SLOTS = 16


def scenario(load: dict) -> dict:
    return {
        "name": "bench-search",
        "target": {"url": "embedded", "simulator": {"max_num_seqs": SLOTS, "decode_base_ms": 8,
                                                    "decode_per_seq_ms": 0.5}},
        "corpus": {"path": "synthetic:prompt_tokens=32,output_tokens=32,n=2000,seed=1", "min_distinct": 1000},
        "request": {"max_tokens": 32, "ignore_eos": True, "timeout_s": 30},
        # The bench compares time, not validity: a busy bench host must not halt the search.
        "load": {**load, "step_s": 10, "warmup_s": 1, "min_requests": 100, "max_loop_lag_p99_ms": 500},
        "slo": {"ttft_p95_ms": 150, "tpot_p95_ms": None},
    }


def run(tmp: Path, name: str, load: dict) -> tuple[float, list[dict], dict]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario(load)))
    t0 = time.monotonic()
    r = subprocess.run([*CAPACITY, "run", str(path), "--output", str(tmp / name)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=1800)
    wall = time.monotonic() - t0
    folders = sorted(p for p in (tmp / name).iterdir() if p.is_dir())
    if r.returncode not in (0, 1) or not folders:
        print(r.stdout[-2000:] + r.stderr[-2000:])
        raise SystemExit(f"{name}: capacity run exited {r.returncode}")
    doc = json.loads((folders[-1] / "steps.json").read_text())
    summary = json.loads((folders[-1] / "summary.json").read_text())
    return wall, doc["steps"], summary


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="capacity-search-") as td:
        tmp = Path(td)
        s_wall, s_steps, s_sum = run(tmp, "search", {"kind": "capacity_search", "loop": "closed", "start": 1,
                                                     "max_level": 256})
        search = s_sum["search"]
        print(f"search: {len(s_steps)} steps {[s['level'] for s in s_steps]} in {s_wall:.0f} s; bracket "
              f"{search['bracket']} ({search['stopped']}); closed form: SLO holds up to {SLOTS} users", flush=True)
        fails = [st["level"] for st in search["steps"] if st["judgement"] != "pass"]
        top = int(max(fails) if fails else search["highest_pass"])
        g_wall, g_steps, g_sum = run(tmp, "grid", {"kind": "concurrency_sweep", "levels": list(range(1, top + 1))})
        passed = [r["level"] for r in g_sum["steps"] if r.get("slo_judgement") == "pass"]
        print(f"fixed sweep 1..{top} by 1 user: {len(g_steps)} steps in {g_wall:.0f} s; highest passing level "
              f"{max(passed) if passed else 'none'}", flush=True)
        print(f"search / fixed sweep: time {s_wall / g_wall:.2f} (goal ≤ 0.50), steps {len(s_steps) / len(g_steps):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
