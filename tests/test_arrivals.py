"""Arrival schedules: rate, burstiness (cv), exact split across workers, ramp; and the pacer."""

from __future__ import annotations

import numpy as np
import pytest

from capacity_plugins.rehearsal.arrivals import offered_in_window, schedule, shard


def _cv(offsets: np.ndarray) -> float:
    gaps = np.diff(offsets)
    return float(gaps.std() / gaps.mean())


@pytest.mark.parametrize(("kind", "cv", "want_cv"), [("poisson", 1.0, 1.0), ("gamma", 2.0, 2.0), ("gamma", 0.5, 0.5), ("constant", 1.0, 0.0)])
def test_rate_and_cv(kind, cv, want_cv):
    rate, duration = 50.0, 400.0
    offs = schedule(kind, rate, duration, cv=cv, seed=7)
    n = len(offs)
    # Count of a renewal process over T: sd ≈ cv·sqrt(rate·T); 4 sd is a safe bound (20 000 arrivals).
    assert abs(n - rate * duration) <= 4 * max(want_cv, 0.05) * np.sqrt(rate * duration) + 1
    assert np.all(np.diff(offs) >= 0) and offs.min() >= 0 and offs.max() < duration
    assert _cv(offs) == pytest.approx(want_cv, abs=0.08 * max(want_cv, 0.1) + 0.02)


def test_same_seed_same_schedule_and_steps_differ():
    a = schedule("poisson", 5, 60, seed=3, step=1)
    b = schedule("poisson", 5, 60, seed=3, step=1)
    c = schedule("poisson", 5, 60, seed=3, step=2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[: min(len(a), len(c))], c[: min(len(a), len(c))])


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_shards_partition_the_global_schedule_exactly(workers):
    offs = schedule("gamma", 13.0, 30.0, cv=1.7, seed=11)
    parts = [shard(offs, k, workers) for k in range(workers)]
    merged = np.sort(np.concatenate(parts))
    assert np.array_equal(merged, offs)  # nothing lost, nothing duplicated: swarm offers exactly the target
    assert sum(len(p) for p in parts) == len(offs)
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_shard_rejects_bad_index():
    with pytest.raises(ValueError):
        shard(np.arange(3.0), 2, 2)


def test_ramp_rises_linearly_then_holds():
    rate, ramp, hold = 40.0, 50.0, 100.0
    offs = schedule("poisson", rate, ramp + hold, seed=5, ramp_s=ramp)
    # Expected counts: ramp half = rate·ramp/2 = 1000, first quarter of the ramp = 1/16 of that mass × 4 … check thirds.
    first_half_ramp = offered_in_window(offs, 0, ramp / 2)
    second_half_ramp = offered_in_window(offs, ramp / 2, ramp)
    holding = offered_in_window(offs, ramp, ramp + hold)
    assert first_half_ramp == pytest.approx(rate * ramp / 8, rel=0.2)  # ∫0^{R/2} rate·t/R dt
    assert second_half_ramp == pytest.approx(3 * rate * ramp / 8, rel=0.12)
    assert holding == pytest.approx(rate * hold, rel=0.06)


def test_offered_in_window_counts_half_open():
    offs = np.array([0.0, 1.0, 2.0, 3.0])
    assert offered_in_window(offs, 1.0, 3.0) == 2


def test_pacer_hands_arrivals_on_time_and_counts_cap_hits():
    import time

    import gevent

    from capacity_plugins.client.pacer import Pacer

    pacer = Pacer(idle_poll_s=0.05)
    got: list[tuple[float, float]] = []

    def user(hold_s: float) -> None:
        for _ in range(200):
            due = pacer.wait_next()
            if due is None:
                if pacer.step is None:
                    return
                continue
            got.append((due, time.time()))
            gevent.sleep(hold_s)  # the "request"

    # One fast user and 20 arrivals 20 ms apart: never blocked, no cap hits.
    start = time.time() + 0.05
    pacer.begin(0, start, np.arange(20) * 0.02)
    g = gevent.spawn(user, 0.0)
    # until the user has every arrival (a fixed sleep would race the last one on a loaded host)
    waited = 0.0
    while len(got) < 20 and waited < 10.0:
        gevent.sleep(0.05)
        waited += 0.05
    pacer.stop()
    g.join(timeout=2)
    assert len(got) == 20
    assert [d for d, _ in got] == pytest.approx(list(start + np.arange(20) * 0.02))
    stats = pacer.stats[0]
    assert stats.scheduled == 20
    # A cap hit means an arrival came due while the one user still had the previous one: with an
    # instant "request" that happens only when the process was not scheduled for a whole 20 ms
    # gap (the dispatcher then finds two due at once), which a loaded host does; never otherwise.
    starved = sum(lag_ms >= 20.0 - 1.0 for lag_ms in stats.dispatch_lag_ms)
    assert stats.cap_hits <= starved, stats

    # One slow user (100 ms per request) against arrivals every 20 ms: the cap (1 user) binds.
    got.clear()
    start = time.time() + 0.05
    pacer.begin(1, start, np.arange(10) * 0.02)
    g = gevent.spawn(user, 0.1)
    gevent.sleep(0.4)
    assert pacer.in_flight == 1
    pacer.stop()
    g.kill()
    assert pacer.stats[1].cap_hits >= 5
    lags = [sent - due for due, sent in got]
    assert max(lags) > 0.05  # late sends keep their scheduled time: the wait is visible, not omitted


def test_an_arrival_after_the_windows_end_waits_for_an_extension():
    # The window ends at 0.3 s and the next arrival is due at 0.5 s: the pacer must not give up
    # on it while the window can still be extended (the rehearsal extends it for min_requests a
    # moment later); it gave up at once, and a step ran on for a minute with no arrival.
    import time

    import gevent

    from capacity_plugins.client.pacer import Pacer

    pacer = Pacer(idle_poll_s=0.05)
    got: list[float] = []

    def user() -> None:
        while pacer.step is not None:
            due = pacer.wait_next()
            if due is not None:
                got.append(due)

    start = time.time() + 0.05
    pacer.begin(0, start, np.array([0.0, 0.5, 0.6]), end_unix=start + 0.3)
    g = gevent.spawn(user)
    gevent.sleep(0.15)
    pacer.extend(start + 0.55)  # extended after the dispatcher met the arrival at 0.5 s
    gevent.sleep(0.8)
    pacer.stop()
    g.join(timeout=2)
    # 0.0 and 0.5 are inside the extended window; 0.6 is past its end, and the pacer stopped there
    assert got == pytest.approx([start, start + 0.5])
    assert pacer.stats[0].scheduled == 2


def test_pacer_hands_each_arrival_its_trace_request_and_frees_a_user_when_done():
    import time

    import gevent

    from capacity_plugins.client.pacer import Pacer

    pacer = Pacer(idle_poll_s=0.05)
    got: list[tuple[float, object]] = []
    reqs = [("r0",), ("r1",), ("r2",)]
    start = time.time() + 0.05
    pacer.begin(0, start, np.array([0.0, 0.02, 0.04]), requests=reqs)

    def user() -> None:
        while len(got) < 3:
            arrival = pacer.wait_arrival()
            if arrival is None:  # nothing due yet
                continue
            got.append(arrival)
            pacer.release()  # its request is done: nothing held once it stops asking (a drain)

    g = gevent.spawn(user)
    g.join(timeout=2)
    assert [r for _, r in got] == reqs
    assert [d for d, _ in got] == pytest.approx([start, start + 0.02, start + 0.04])
    assert pacer.in_flight == 0  # before the release, a user that stopped asking stayed "in flight"
