"""The LLM tab's per-step live numbers (webui/steps.py), without a browser or a Locust process:
records counted in their step's measured window as the step authority counts them, per-step
percentiles from the sketches, the SLO judged by the capacity search's own rule with its interval,
validity from the authority's rows plus `insufficient`, and the provisional knee and capacity."""

import random
from types import SimpleNamespace

import pytest

from capacity_plugins.contracts.percentiles import nearest_rank
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.slo import judge_counts, judge_step, within
from capacity_plugins.rehearsal.steps import Step
from capacity_plugins.webui.steps import LiveSteps

SLO = SLOConfig(ttft_p95_ms=100.0, tpot_p95_ms=20.0)


def rec(step, sent, *, ttft=50.0, e2e=200.0, ok=True, kind=None, tpot=10.0, tokens=8):
    return SimpleNamespace(step=step, sent_unix=sent, ok=ok, error_kind=kind, ttft_ms=ttft if ok else None,
                           e2e_ms=e2e, itl_ms=[tpot, tpot], tpot_ms=tpot, output_tokens=tokens,
                           scheduled_unix=None, ttft_from_schedule_ms=None, e2e_from_schedule_ms=None)


def step(index, level, start, *, warmup=1.0, length=10.0, drained=True):
    s = Step(index=index, kind="concurrency", level=level, start_unix=start, warmup_end_unix=start + warmup,
             end_unix=start + length)
    if drained:
        s.drain_end_unix = start + length + 1
    return s


def test_records_count_in_their_steps_window_as_the_authority_counts_them():
    live = LiveSteps(SLO)
    s = step(0, 2, 1000.0)
    live.step_started(s)
    live.add(rec(0, 1000.5))  # warm-up: left out
    for i in range(20):
        live.add(rec(0, 1001.0 + i * 0.4))  # in the window
    live.add(rec(0, 1005.0, ok=False, kind="cancelled"))  # cancelled at a stop: left out
    live.add(rec(0, 1005.0, ok=False, kind="http_500"))  # an error: counted
    live.add(rec(0, 1010.5))  # after the window closed (the drain): left out
    live.add(rec(None, 1005.0))  # outside any step
    live.add(rec(7, 1005.0))  # a step this view never heard of
    doc = live.document(now_unix=2000.0)
    (row,) = doc["steps"]
    assert row["state"] == "finished" and row["requests"] == 21 and row["errors"] == 1
    # completions inside the 9-s window per second: ends at sent + 0.2 s (e2e 200 ms)
    assert row["achieved_rps"] == pytest.approx(sum(1 for i in range(20) if 1001.0 + i * 0.4 + 0.2 < 1010.0) / 9.0)


def test_per_step_percentiles_are_each_steps_own_within_the_sketch_error():
    live = LiveSteps(SLO)
    rng = random.Random(3)
    values = {0: [], 1: []}
    for i, level in enumerate((1, 8)):
        live.step_started(step(i, level, 1000.0 + 20 * i))
        for k in range(300):
            v = rng.uniform(10, 40) * (1 + 9 * i)  # the second step is ten times slower
            values[i].append(v)
            live.add(rec(i, 1001.0 + 20 * i + k * 0.02, ttft=v))
    doc = live.document(now_unix=2000.0)
    for i, row in enumerate(doc["steps"]):
        exact = nearest_rank(sorted(values[i]), 0.95)
        assert row["ttft_ms_p95"] == pytest.approx(exact, rel=0.01)
    assert doc["steps"][1]["ttft_ms_p50"] > 5 * doc["steps"][0]["ttft_ms_p95"]


def test_slo_judgement_is_the_capacity_searchs_rule_with_its_interval():
    rng = random.Random(7)
    for n, share_over in ((200, 0.0), (200, 0.2), (40, 0.0), (500, 0.05)):
        live = LiveSteps(SLO)
        live.step_started(step(0, 4, 1000.0))
        views = {"ttft_ms": [], "e2e_ms": [], "tpot_ms": []}
        for k in range(n):
            ttft = 150.0 if rng.random() < share_over else 40.0
            live.add(rec(0, 1001.0 + k * 8.0 / n, ttft=ttft))
            views["ttft_ms"].append(ttft)
            views["e2e_ms"].append(200.0)
            views["tpot_ms"].append(10.0)
        judged = live.document(now_unix=2000.0)["steps"][0]["slo"]
        assert (judged["judgement"], judged["limiting"]) == judge_step(views, n, 0, SLO, 0.95)
        ttft = next(lim for lim in judged["limits"] if lim["key"] == "ttft_p95_ms")
        k, total = within(views["ttft_ms"], 100.0)
        assert (ttft["within"], ttft["n"]) == (k, total)
        assert ttft["share_lo"] <= ttft["share"] <= ttft["share_hi"]
    # 40 requests all within cannot show 95 % at 95 % confidence (72 needed): uncertain, not pass
    live = LiveSteps(SLO)
    live.step_started(step(0, 1, 1000.0))
    for k in range(40):
        live.add(rec(0, 1001.0 + k * 0.1))
    assert live.document(now_unix=2000.0)["steps"][0]["slo"]["judgement"] == "uncertain"


def test_judge_counts_is_judge_step():
    rng = random.Random(11)
    slo = SLOConfig(ttft_p95_ms=100.0, tpot_p95_ms=20.0, e2e_p95_ms=500.0, error_rate=0.05)
    for _ in range(200):
        n = rng.randint(1, 150)
        errors = rng.randint(0, n // 8)
        views = {m: [rng.choice([None, rng.uniform(0, lim * 1.3)]) if rng.random() < 0.05 else rng.uniform(0, lim * 1.1)
                     for _ in range(n - errors)]
                 for m, lim in (("ttft_ms", 100.0), ("tpot_ms", 20.0), ("e2e_ms", 500.0))}
        counts = {m: within(v, lim) for (m, v), lim in zip(views.items(), (100.0, 20.0, 500.0), strict=True)}
        assert judge_counts(counts, n, errors, slo, 0.95) == judge_step(views, n, errors, slo, 0.95)


def test_validity_from_the_authoritys_rows_and_insufficient_for_a_finished_step():
    live = LiveSteps(SLO)
    live.step_started(step(0, 1, 1000.0))
    live.step_started(step(1, 2, 1020.0))
    live.step_started(step(2, 4, 1040.0, drained=False))  # running
    for i in range(3):
        for k in range(30):
            live.add(rec(i, 1001.0 + 20 * i + k * 0.2))
    rows = [{"index": 0, "client_limited": True, "client_limited_reason": "generator event loop late: lag p99 40 ms",
             "min_requests": 20},
            {"index": 1, "membership_changed": True, "membership_reason": "worker 1 lost (no heartbeat)",
             "min_requests": 50},
            {"index": 2, "min_requests": 50}]
    doc = live.document(rows, phase="run", now_unix=1045.0)
    s0, s1, s2 = doc["steps"]
    assert not s0["valid"] and [i["kind"] for i in s0["invalid"]] == ["client_limited"]
    assert "lag p99 40 ms" in s0["invalid"][0]["reason"]
    assert [i["kind"] for i in s1["invalid"]] == ["membership_changed", "insufficient"]
    assert s1["invalid"][1]["reason"] == "30 measured requests < load.min_requests 50"
    # the running step is not called insufficient while it still runs
    assert s2["state"] == "running" and s2["phase"] == "run" and s2["valid"]


def test_provisional_knee_and_capacity_from_finished_valid_steps():
    live = LiveSteps(SLOConfig(ttft_p95_ms=100.0, tpot_p95_ms=None))
    # throughput doubles up to 4 users, then is flat; TTFT breaks the SLO at 16
    for i, (level, per_s, ttft) in enumerate(((1, 10, 20.0), (2, 20, 22.0), (4, 40, 30.0), (8, 41, 60.0),
                                              (16, 41, 300.0))):
        start = 1000.0 + 30 * i
        live.step_started(step(i, level, start, warmup=1.0, length=21.0))
        n = per_s * 20
        for k in range(n):
            live.add(rec(i, start + 1.0 + k * 20.0 / n, ttft=ttft, e2e=10.0))
    doc = live.document(now_unix=2000.0)
    assert doc["knee"]["level"] == 4 and doc["knee"]["provisional"]
    assert doc["capacity"]["level"] == 8 and doc["capacity"]["provisional"]
    assert doc["capacity"]["rps"] == pytest.approx(41, rel=0.02)
    assert [s["slo"]["judgement"] for s in doc["steps"]] == ["pass", "pass", "pass", "pass", "fail"]
    # an invalid step never sets them
    rows = [{"index": 3, "client_limited": True, "client_limited_reason": "CPU"}]
    assert live.document(rows, now_unix=2000.0)["capacity"]["level"] == 4


def test_no_knee_while_throughput_still_rises_and_a_new_test_starts_afresh():
    live = LiveSteps(SLO)
    for i, level in enumerate((1, 2)):
        live.step_started(step(i, level, 1000.0 + 30 * i))
        for k in range(100 * level):
            live.add(rec(i, 1001.0 + 30 * i + k * 8.0 / (100 * level)))
    assert live.document(now_unix=2000.0)["knee"] is None
    live.step_started(step(0, 1, 3000.0, drained=False))  # the next test from the web UI
    doc = live.document(now_unix=3000.5)
    assert [s["index"] for s in doc["steps"]] == [0] and doc["steps"][0]["requests"] == 0


def _bare_authority(now):
    """A master's StepAuthority with only what live_rows / live_swarm read (no Locust, no scenario)."""
    from capacity_plugins.rehearsal.authority import StepAuthority
    from capacity_plugins.rehearsal.steps import StepAccounting, StepTimeline

    a = StepAuthority.__new__(StepAuthority)
    a.generator, a.master, a.master_watch = None, True, None
    a.timeline = StepTimeline()
    a.accounting = StepAccounting(a.timeline)
    a.plans = [SimpleNamespace(min_requests=50)] * 3
    a.watch_last = {}
    a._live_rows, a._live_recent = {}, {}
    return a


def test_authority_swarm_health_late_silent_and_loop_lag():
    now = 10_000.0
    a = _bare_authority(now)
    a.watch_last = {0: (now - 0.5, 3), 1: (now - 3.0, 1), 2: (now - 8.0, 0)}
    for t in range(100):
        a.accounting.add_loop_lag("worker-0", now - 5 + t * 0.05, 2.0 if t % 10 else 30.0)
    a.accounting.add_loop_lag("worker-0", now - 60, 900.0)  # long ago: outside the last 10 s
    a.accounting.add_master_lag(now - 1, 4.0)
    got = {p["process"]: p for p in a.live_swarm(now)}
    assert [got[f"worker-{w}"]["health"] for w in range(3)] == ["ok", "late", "silent"]
    assert got["worker-0"]["in_flight"] == 3 and got["worker-0"]["loop_lag_max_ms"] == 30.0
    assert got["worker-1"]["loop_lag_p99_ms"] is None and got["master"]["loop_lag_p99_ms"] == 4.0


def test_authority_live_rows_keep_a_drained_step_and_refresh_a_running_one():
    now = 10_000.0
    a = _bare_authority(now)
    done = step(0, 1, now - 40, length=20.0)  # drained at now - 19
    running = step(1, 2, now - 15, length=20.0, drained=False)
    a.timeline.upsert(done)
    a.timeline.upsert(running)
    rows = a.live_rows(now)
    assert [r["index"] for r in rows] == [0, 1] and rows[0]["min_requests"] == 50
    assert (0, done.start_unix) in a._live_rows and (1, running.start_unix) not in a._live_rows
    a.accounting.note_membership(0, "late news")  # a kept row is final: not recomputed
    a.accounting.note_membership(1, "worker 1 lost (no heartbeat)")
    assert not a.live_rows(now + 1)[0]["membership_changed"]
    assert not a.live_rows(now + 1)[1]["membership_changed"]  # recomputed at most every 5 s
    assert a.live_rows(now + 6)[1]["membership_changed"]
