"""Master + 2 workers on loopback, with two CPU burners on this host: the sweep completes with no
worker lost and records == requests (make bench runs it five times in a row)."""

from __future__ import annotations

import pytest

from bench.swarm_loaded import run_loaded_swarm

pytestmark = [pytest.mark.slow, pytest.mark.alone]


def test_master_and_two_workers_hold_on_a_loaded_host(tmp_path):
    r = run_loaded_swarm(tmp_path)
    assert r.master_rc == 0 and r.worker_rcs == [0, 0], r.log[-3000:]
    assert r.workers_lost == [], r.workers_lost
    assert r.records_lost == 0 and r.finished == r.locust_requests > 50
    assert [s["level"] for s in r.steps] == [2, 4, 8]
    assert not any(s["membership_changed"] for s in r.steps)
    assert all(s["master_loop_lag_p99_ms"] is not None for s in r.steps)  # the master watches itself
