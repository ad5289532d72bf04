"""Master + 2 workers on a loaded host, five runs in a row: workers lost and records complete.

The host is loaded on purpose (two CPU-burner processes on top of the swarm and the simulator),
as users' hosts often are. Each run must end with no worker lost and every finished request
both counted by Locust and written to requests.jsonl; the master's and the workers' own loop lag
(steps.json) say how starved they were.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from swarm_loaded import run_loaded_swarm

RUNS = 5


def main() -> int:
    ok = 0
    with tempfile.TemporaryDirectory(prefix="capacity-swarm-") as tmp:
        for i in range(1, RUNS + 1):
            r = run_loaded_swarm(Path(tmp) / f"run-{i}")
            complete = r.master_rc == 0 and not r.workers_lost and r.finished == r.locust_requests and r.records_lost == 0
            ok += complete
            if not r.steps:  # the swarm never finished a step: say why instead of a figure
                print(f"run {i}: master rc {r.master_rc}, workers rc {r.worker_rcs}, no step finished; "
                      f"the master's last lines:\n{r.log[-1500:]}", flush=True)
                continue
            master_lag = max((s["master_loop_lag_p99_ms"] or 0.0) for s in r.steps)
            worker_lag = max((s["loop_lag_p99_ms"] or 0.0) for s in r.steps)
            print(f"run {i}: master rc {r.master_rc}, workers lost {len(r.workers_lost)}, records {r.finished} "
                  f"finished / {r.locust_requests} Locust requests (lost: {r.records_lost}), loop lag p99 "
                  f"master {master_lag:.0f} ms, workers {worker_lag:.0f} ms, steps flagged "
                  f"{sum(1 for s in r.steps if s['client_limited'])}/{len(r.steps)}", flush=True)
    print(f"loaded swarm: {ok}/{RUNS} runs complete with no worker lost (goal {RUNS}/{RUNS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
