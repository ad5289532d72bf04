"""Step timeline lookups, per-step accounting and the client_limited definition."""

from __future__ import annotations

import json

import pytest

from capacity_plugins.rehearsal.steps import (
    RECORD_EARLY_S,
    ClientLimits,
    Step,
    StepAccounting,
    StepTimeline,
    write_steps_json,
)


def timeline() -> StepTimeline:
    tl = StepTimeline()
    tl.upsert(Step(0, "rate", 2.0, 100.0, 102.0, 112.0, target_rps=2.0, drain_end_unix=113.0, offered=20))
    tl.upsert(Step(1, "rate", 4.0, 113.0, 115.0, 125.0, target_rps=4.0, offered=41))
    return tl


def test_lookup_marks_warmup_and_after_window():
    tl = timeline()
    assert tl.lookup(99.0) == (None, False)
    assert tl.lookup(101.0) == (0, True)
    assert tl.lookup(105.0) == (0, False)
    assert tl.lookup(112.5) == (0, True)  # sent after the window closed (before the worker heard): excluded
    assert tl.lookup(113.0) == (1, True)
    assert tl.lookup(120.0) == (1, False)


def test_a_record_stamped_just_before_a_step_by_a_workers_clock_is_in_its_warm_up():
    tl = timeline()
    tl.upsert(Step(2, "rate", 8.0, 130.0, 132.0, 140.0, target_rps=8.0))
    tl.steps[1].drain_end_unix = 126.0
    early = RECORD_EARLY_S
    assert tl.lookup(100.0 - early / 3, early) == (0, True)  # before the first step
    assert tl.lookup(130.0 - early / 3, early) == (2, True)  # in the gap after step 1's drain
    assert tl.lookup(100.0 - 2 * early, early) == (None, False)  # too early: in no step
    assert tl.lookup(127.0, early) == (None, False)
    assert tl.lookup(130.0 - early / 3) == (None, False)  # telemetry and reports stay strict
    assert tl.lookup(112.5, early) == (0, True) and tl.lookup(113.0, early) == (1, True)


def test_message_round_trip():
    s = timeline().steps[0]
    assert Step.from_message(json.loads(json.dumps(s.to_message()))) == s


def rec(step, sent, e2e_ms=500.0, ok=True, scheduled=None):
    return {"step": step, "sent_unix": sent, "e2e_ms": e2e_ms, "ok": ok, "scheduled_unix": scheduled}


def test_rates_and_lag_per_step():
    acc = StepAccounting(timeline(), ClientLimits(max_schedule_lag_p99_ms=100))
    for i in range(20):  # step 0: 20 arrivals in its 10 s window, each sent 10 ms late
        t = 102.0 + i * 0.5
        acc.add_record(rec(0, t + 0.01, e2e_ms=200, scheduled=t))
    acc.add_record(rec(0, 111.9, e2e_ms=500, scheduled=111.9))  # completes after the window: sent, not achieved
    acc.add_record(rec(0, 101.0, scheduled=101.0))  # warmup
    acc.add_record(rec(0, 105.0, ok=False, scheduled=105.0))  # failed: sent, not achieved
    acc.add_record({"step": None, "sent_unix": 105.0})
    row = acc.row(acc.timeline.steps[0])
    assert row["offered_rps"] == pytest.approx(2.0)
    assert row["sent_rps"] == pytest.approx(2.2)
    assert row["achieved_rps"] == pytest.approx(2.0)
    assert row["schedule_lag_p99_ms"] == pytest.approx(10.0, abs=0.01)
    assert row["client_limited"] is False and row["client_limited_reason"] is None
    for key in ("index", "kind", "level", "start_unix", "warmup_end_unix", "end_unix", "target_rps", "client_cpu_max_pct"):
        assert key in row


def test_server_saturation_is_not_client_limited():
    acc = StepAccounting(timeline())
    # Sent on time, but the server finishes only a few inside the window: that is the knee, not the client.
    for i in range(40):
        t = 115.0 + i * 0.25
        acc.add_record(rec(1, t, e2e_ms=30_000, scheduled=t))
    row = acc.row(acc.timeline.steps[1])
    assert row["achieved_rps"] == 0.0 and row["sent_rps"] == pytest.approx(4.0)
    assert row["client_limited"] is False


def test_client_limited_by_lag_cpu_and_cap():
    acc = StepAccounting(timeline(), ClientLimits(max_schedule_lag_p99_ms=50, max_client_cpu_pct=90))
    for i in range(9):
        t = 103.0 + i
        acc.add_record(rec(0, t + (0.3 if i == 8 else 0.001), scheduled=t))
    row = acc.row(acc.timeline.steps[0])
    assert row["client_limited"] and "lag p99 300 ms" in row["client_limited_reason"]

    acc = StepAccounting(timeline())
    acc.add_cpu("worker-1", 103.0, 40.0)
    acc.add_cpu("worker-1", 104.0, 97.0)  # one spike: max reported, not "stayed above"
    acc.add_cpu("worker-1", 105.0, 50.0)
    row = acc.row(acc.timeline.steps[0])
    assert row["client_cpu_max_pct"] == 97.0 and not row["client_limited"]
    for u in (106.0, 107.0, 108.0):
        acc.add_cpu("worker-2", u, 99.0)
    acc.add_cpu("worker-2", 130.0, 99.0)  # outside every window
    row = acc.row(acc.timeline.steps[0])
    assert row["client_limited"] and "worker-2" in row["client_limited_reason"]
    assert acc.row(acc.timeline.steps[1])["client_cpu_max_pct"] is None

    acc = StepAccounting(timeline())
    acc.set_counters("worker-0", 1, {"cap_hits": 1, "dispatch_lag_p99_ms": 1.0})
    acc.set_counters("worker-0", 1, {"cap_hits": 2, "dispatch_lag_p99_ms": 1.0})  # cumulative: replaces
    acc.set_counters("worker-1", 1, {"cap_hits": 1})
    row = acc.row(acc.timeline.steps[1])
    assert row["client_limited"] and "cap held back 3" in row["client_limited_reason"]


def test_client_limited_by_event_loop_lag_and_backlogged_reads():
    acc = StepAccounting(timeline(), ClientLimits(max_loop_lag_p99_ms=25.0))
    for k in range(200):  # a healthy worker: ticks a millisecond late
        acc.add_loop_lag("worker-0", 102.0 + k * 0.05, 1.0)
    row = acc.row(acc.timeline.steps[0])
    assert row["loop_lag_p99_ms"] == 1.0 and not row["client_limited"]
    for k in range(200):  # a paused one: half its ticks 50 ms late
        acc.add_loop_lag("worker-1", 102.0 + k * 0.05, 50.0 if k % 2 else 0.5)
    row = acc.row(acc.timeline.steps[0])
    assert row["loop_lag_p99_ms"] == 50.0 and row["loop_lag_max_ms"] == 50.0
    assert row["client_limited"] and "event loop late" in row["client_limited_reason"]
    assert "worker-1" in row["client_limited_reason"]

    acc = StepAccounting(timeline())
    acc.set_counters("worker-0", 0, {"reads": 1000, "backlog_reads": 30})
    row = acc.row(acc.timeline.steps[0])
    assert row["backlog_read_share"] == pytest.approx(0.03) and not row["client_limited"]
    acc.set_counters("worker-1", 0, {"reads": 1000, "backlog_reads": 900})
    row = acc.row(acc.timeline.steps[0])
    assert row["client_limited"] and "already waiting" in row["client_limited_reason"]
    acc = StepAccounting(timeline())
    acc.set_counters("worker-0", 0, {"reads": 20, "backlog_reads": 20})  # too few reads to say
    assert not acc.row(acc.timeline.steps[0])["client_limited"]


def test_membership_changes_and_measured_requests():
    acc = StepAccounting(timeline())
    acc.note_membership(1, "worker 1 lost (no heartbeat)")
    acc.note_membership(1, "worker 1 lost (no heartbeat)")  # said once
    row = acc.row(acc.timeline.steps[1])
    assert row["membership_changed"] and row["membership_reason"] == "worker 1 lost (no heartbeat)"
    assert not acc.row(acc.timeline.steps[0])["membership_changed"]
    acc.add_record(rec(0, 105.0))
    acc.add_record({**rec(0, 106.0, ok=False), "error_kind": "cancelled"})  # stopped, not measured
    acc.add_record(rec(0, 101.0))  # warmup
    assert acc.measured(0) == 1
    acc.add_cpu("worker-3", 105.0, 10.0)
    assert acc.row(acc.timeline.steps[0])["workers"] == 1


def test_write_steps_json(tmp_path):
    acc = StepAccounting(timeline())
    p = tmp_path / "steps.json"
    write_steps_json(p, acc.document())
    doc = json.loads(p.read_text())
    assert [s["index"] for s in doc["steps"]] == [0, 1]
    assert doc["steps"][0]["achieved_rps"] == 0.0
