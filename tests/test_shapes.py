"""RehearsalShape.tick() driven by an injected clock and in-flight count: no sleeping, no runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity_plugins.rehearsal.shapes import RehearsalShape, StepPlan, plan_steps
from capacity_plugins.scenario import load_scenario


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(plans, inflight, **kw):
    clock = Clock()
    events: list[tuple[str, int]] = []
    shape = RehearsalShape(
        plans,
        drain_timeout_s=kw.pop("drain_timeout_s", 30.0),
        in_flight=inflight,
        clock=clock,
        on_step_start=lambda s: events.append(("start", s.index)),
        on_window_end=lambda s: events.append(("window_end", s.index)),
        on_drain_end=lambda s: events.append(("drain_end", s.index)),
        on_finished=lambda: events.append(("finished", -1)),
        **kw,
    )
    return shape, clock, events


def sweep(levels=(1, 2, 4), step_s=10.0, warmup_s=2.0):
    return [StepPlan("concurrency", float(n), n, 100.0, step_s, warmup_s) for n in levels]


def test_concurrency_sweep_steps_drains_and_stops():
    busy = {"n": 0}
    shape, clock, events = make(sweep(), lambda since: busy["n"], settle_s=5.0)
    assert shape.tick() == (1, 100.0)
    s0 = shape.steps[0]
    assert (s0.start_unix, s0.warmup_end_unix, s0.end_unix) == (1000.0, 1002.0, 1010.0)
    clock.t = 1009.9
    assert shape.tick() == (1, 100.0)
    # Window over: ramp to 0, requests still running → keep draining.
    clock.t = 1010.2
    busy["n"] = 1
    assert shape.tick() == (0, 100.0)
    clock.t = 1013.0
    assert shape.tick() == (0, 100.0)
    assert events == [("start", 0), ("window_end", 0)]
    # Idle: the next step starts at once, on an idle server.
    busy["n"] = 0
    clock.t = 1014.0
    assert shape.tick() == (2, 100.0)
    assert s0.drain_end_unix == 1014.0
    s1 = shape.steps[1]
    assert (s1.index, s1.level, s1.start_unix, s1.end_unix) == (1, 2.0, 1014.0, 1024.0)
    clock.t = 1024.0
    assert shape.tick() == (0, 100.0)
    clock.t = 1025.0
    assert shape.tick() == (4, 100.0)
    clock.t = 1035.0
    assert shape.tick() == (0, 100.0)
    clock.t = 1036.0
    assert shape.tick() == (0, 100.0)  # settle: the workers' last reports reach the master
    clock.t = 1040.9
    assert shape.tick() == (0, 100.0)
    clock.t = 1041.0
    assert shape.tick() is None
    assert shape.finished
    assert [e for e in events if e[0] == "start"] == [("start", 0), ("start", 1), ("start", 2)]
    assert events[-1] == ("finished", -1)


def test_drain_stops_all_users_at_once():
    plans = [StepPlan("concurrency", 64.0, 64, 20.0, 10.0, 2.0), StepPlan("concurrency", 128.0, 128, 20.0, 10.0, 2.0)]
    shape, clock, _ = make(plans, lambda since: 0)
    assert shape.tick() == (64, 20.0)  # ramp up at the scenario's spawn rate
    clock.t = 1010.0
    assert shape.tick() == (0, 640.0)  # ramp down in one go


def test_drain_bounded_by_timeout_and_unknown_counts_as_busy():
    shape, clock, events = make(sweep((1, 2)), lambda since: None, drain_timeout_s=7.0)
    shape.tick()
    clock.t = 1010.0
    assert shape.tick() == (0, 100.0)
    clock.t = 1016.9
    assert shape.tick() == (0, 100.0)  # no report yet from some worker: not idle
    clock.t = 1017.0
    assert shape.tick() == (2, 100.0)  # drain timeout reached: move on anyway


def test_in_flight_is_asked_only_for_reports_after_the_drain_began():
    seen: list[float] = []
    shape, clock, _ = make(sweep((1, 2)), lambda since: seen.append(since) or 0)
    shape.tick()
    clock.t = 1010.5
    shape.tick()
    clock.t = 1011.5
    shape.tick()
    assert seen == [1010.5]


def test_open_loop_pool_stays_and_steps_start_after_lead():
    plans = [StepPlan("rate", r, 16, 200.0, 10.0, 2.0, r) for r in (1.0, 2.5)]
    shape, clock, _ = make(plans, lambda since: 0, open_loop_lead_s=0.25)
    assert shape.tick() == (16, 200.0)
    s0 = shape.steps[0]
    assert s0.start_unix == 1000.25 and s0.end_unix == 1010.25 and s0.target_rps == 1.0
    clock.t = 1010.3
    assert shape.tick() == (16, 200.0)  # drain: users stay, the schedule simply ends
    clock.t = 1011.0
    assert shape.tick() == (16, 200.0)
    assert shape.steps[1].target_rps == 2.5


def test_prepare_waits_for_ready_generators_and_the_open_loop_pool():
    plans = [StepPlan("rate", 4.0, 16, 200.0, 10.0, 2.0, 4.0)]
    state = {"ready": False, "users": 0}
    clock = Clock()
    shape = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                           ready=lambda: state["ready"], users_running=lambda: state["users"],
                           prepare_timeout_s=30.0)
    assert shape.tick() == (0, 200.0) and shape.phase == "prepare"  # the test starts, no users yet
    clock.t = 1001.0
    state["ready"] = True
    assert shape.tick() == (16, 200.0) and not shape.steps  # the pool spawns; no arrivals yet
    clock.t = 1002.0
    state["users"] = 16
    assert shape.tick() == (16, 200.0)
    assert shape.steps[0].start_unix == 1002.25  # arrivals begin once the pool is up
    # a generator that never gets ready does not hang the rehearsal
    shape2 = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                            ready=lambda: False, prepare_timeout_s=30.0)
    clock.t = 2000.0
    assert shape2.tick() == (0, 200.0)
    clock.t = 2031.0
    assert shape2.tick() == (16, 200.0) and shape2.steps


def test_the_next_step_waits_for_a_worker_that_joined_to_be_set_up():
    state = {"ready": True}
    shape, clock, events = make(sweep(levels=(2, 4)), lambda since: 0, ready=lambda: state["ready"],
                                prepare_timeout_s=20.0, drain_timeout_s=5.0)
    shape.tick()
    assert events == [("start", 0)]
    clock.t += 10.0
    shape.tick()  # window ends: drain
    state["ready"] = False  # a worker joined during step 1; its setup is on the way
    clock.t += 1.0
    assert shape.tick() == (0, 100.0) and ("start", 1) not in events
    state["ready"] = True
    clock.t += 1.0
    assert shape.tick() == (4, 100.0) and events[-1] == ("start", 1)
    # a worker that never gets ready delays the next step by prepare_timeout_s at most
    shape2, clock2, events2 = make(sweep(levels=(2, 4)), lambda since: 0, ready=lambda: True,
                                   prepare_timeout_s=20.0, drain_timeout_s=5.0)
    shape2.tick()
    shape2.ready = lambda: False
    clock2.t += 10.0
    shape2.tick()
    clock2.t += 24.0
    assert shape2.tick() == (0, 100.0)
    clock2.t += 2.0
    assert shape2.tick() == (4, 100.0) and events2[-1] == ("start", 1)


def test_a_step_short_of_min_requests_runs_on_until_it_has_them_or_hits_the_cap():
    plans = [StepPlan("concurrency", 2.0, 2, 100.0, 10.0, 2.0, min_requests=100, max_duration_s=30.0)]
    have = {"n": 0}
    extended: list[float] = []
    clock = Clock()
    shape = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                           measured=lambda index: have["n"], on_window_extended=lambda s: extended.append(s.end_unix))
    shape.tick()
    clock.t = 1005.0
    have["n"] = 30
    assert shape.tick() == (2, 100.0) and not extended  # too early to tell
    clock.t = 1008.0  # 2 s before the end: 50 in 6 s → ~67 expected by the end; ~33 more need ~4 s
    have["n"] = 50
    assert shape.tick() == (2, 100.0)
    assert extended and 1013.5 <= extended[-1] <= 1016.0
    clock.t = extended[-1] - 2.0
    have["n"] = 120  # on track now: no further extension, the window closes at its new end
    shape.tick()
    clock.t = extended[-1]
    assert shape.tick()[0] == 0 and shape.phase == "drain"  # every user told to stop at once
    # never past the cap, however few requests come
    shape2 = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                            measured=lambda index: 1)
    clock.t = 2000.0
    shape2.tick()
    for t in range(2001, 2031):
        clock.t = float(t)
        shape2.tick()
    assert shape2.steps[0].end_unix == 2030.0 and shape2.phase == "drain"


def test_no_extension_is_guessed_during_the_warmup():
    # a 3-s step with 1 s of warm-up: the look-ahead zone starts inside the warm-up, where no
    # measured request can have finished yet — the first tick after it decides, from a real rate
    plans = [StepPlan("concurrency", 1.0, 1, 100.0, 3.0, 1.0, min_requests=10, max_duration_s=15.0)]
    have = {"n": 0}
    extended: list[float] = []
    clock = Clock()
    shape = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                           measured=lambda index: have["n"], on_window_extended=lambda s: extended.append(s.end_unix))
    shape.tick()
    start = shape.steps[0].start_unix
    clock.t = start + 0.9  # in the warm-up, 2.1 s before the end
    assert shape.tick() == (1, 100.0) and not extended
    clock.t = start + 1.05  # just past it: nothing measured has finished yet, and a later tick can decide
    shape.tick()
    assert not extended
    clock.t = start + 1.9
    have["n"] = 8  # 8 in 0.9 s: ~17 by the end, more than the 10 it needs
    shape.tick()
    assert not extended and shape.steps[0].end_unix == start + 3.0
    # the same step finding too few after its warm-up does run on
    shape2 = RehearsalShape(plans, drain_timeout_s=5.0, in_flight=lambda since: 0, clock=clock,
                            measured=lambda index: 1, on_window_extended=lambda s: extended.append(s.end_unix))
    clock.t = 3000.0
    shape2.tick()
    clock.t = 3001.9
    shape2.tick()
    assert extended and extended[-1] > 3003.0


def test_reset_time_restarts_the_rehearsal():
    resets = []
    shape, clock, _ = make(sweep((1, 2)), lambda since: 0, on_reset=lambda: resets.append(1))
    shape.tick()
    clock.t = 1010.0
    shape.tick()
    shape.reset_time()
    assert resets == [1] and shape.steps == []
    assert shape.tick() == (1, 100.0)
    assert shape.steps[0].start_unix == 1010.0


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_plan_steps_from_scenarios(tmp_path):
    s = load_scenario(write(tmp_path, "target: {url: embedded}\nload: {levels: [1, 3], step_s: 5, warmup_s: 1}\n"))
    # min_requests 100 by default; a short step may run on up to 5 × its length to reach it
    assert plan_steps(s) == [
        StepPlan("concurrency", 1.0, 1, 100.0, 5.0, 1.0, min_requests=100, max_duration_s=25.0),
        StepPlan("concurrency", 3.0, 3, 100.0, 5.0, 1.0, min_requests=100, max_duration_s=25.0),
    ]
    s = load_scenario(write(tmp_path, "target: {url: embedded}\nload: {levels: [1], step_s: 5, warmup_s: 1, "
                                      "min_requests: 7, max_step_s: 12}\n"))
    assert (plan_steps(s)[0].min_requests, plan_steps(s)[0].longest_s) == (7, 12.0)
    s = load_scenario(
        write(tmp_path, "target: {url: embedded}\nload: {kind: rate_sweep, levels: [0.5, 2], step_s: 5, warmup_s: 1, max_concurrency: 8}\n")
    )
    p = plan_steps(s)
    assert [(x.kind, x.level, x.users, x.target_rps) for x in p] == [("rate", 0.5, 8, 0.5), ("rate", 2.0, 8, 2.0)]
    s = load_scenario(
        write(tmp_path, "target: {url: embedded}\nload: {kind: peak, ramp_s: 4, hold_s: 6, warmup_s: 1}\ncapacity: {peak_qps: 2, safety_factor: 1.5}\n")
    )
    (peak,) = plan_steps(s)
    assert peak.kind == "peak" and peak.target_rps == pytest.approx(3.0)
    assert peak.duration_s == 10.0 and peak.warmup_s == 5.0 and peak.ramp_s == 4.0
    s = load_scenario(write(tmp_path, "target: {url: embedded}\nload: {kind: peak, users: 12, ramp_s: 4, hold_s: 6}\n"))
    (peak,) = plan_steps(s)
    assert (peak.users, peak.spawn_rate, peak.target_rps) == (12, 3.0, None)


def test_a_step_the_swarm_change_invalidated_is_re_run_once_the_swarm_is_whole():
    from dataclasses import replace

    whole = {"ok": True}
    asked: list[int] = []

    def rerun(step):
        asked.append(step.index)
        return replace(shape.plans[step.index], rerun_of=step.index, rerun_reason="worker 0 lost") if step.index == 0 else None

    shape, clock, events = make(sweep((1, 2)), lambda since: 0, rerun=rerun, ready=lambda: whole["ok"])
    shape.tick()
    clock.t = 1010.0
    shape.tick()  # window over: drain
    clock.t = 1011.0
    assert shape.tick() == (0, 100.0) and shape.phase == "await" and asked == [0]
    whole["ok"] = False  # a worker is still away (the authority's ready() waits for it once a re-run is due)
    clock.t = 1030.0
    assert shape.tick() == (0, 100.0)  # waits for the swarm, not for a timer
    whole["ok"] = True
    clock.t = 1031.0
    assert shape.tick() == (1, 100.0)
    again = shape.steps[1]
    assert (again.index, again.level, again.rerun_of, again.rerun_reason) == (1, 1.0, 0, "worker 0 lost")
    # then the planned step 2 (index 2 now), and no re-run of a valid one
    clock.t = 1041.0
    shape.tick()
    clock.t = 1042.0
    assert shape.tick() == (2, 100.0) and shape.steps[2].rerun_of is None
    assert [p.level for p in shape.plans] == [1.0, 1.0, 2.0]
    # a web-UI restart forgets the re-run
    shape._reset_state()
    assert [p.level for p in shape.plans] == [1.0, 2.0]
