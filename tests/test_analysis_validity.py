"""Which steps may decide: sample size, client limits, swarm changes, interruptions, lost records,
torn and empty record files — and the exit code when nothing is left to decide from."""

from __future__ import annotations

import json
import math

import pytest
from helpers.analysis_data import T0, make_results
from helpers.processes import capacity

from capacity_plugins import analyze
from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.contracts.summary import Setting

# analyses of written results, no load and no timing: at the lowest CPU priority beside the
# measured sweeps, whose idle core it uses (tests/README.md)
pytestmark = pytest.mark.cpu

SLO = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}


def test_steps_of_18_requests_are_insufficient_and_their_p99_has_no_upper_bound(tmp_path):
    # 1.8 rps × 10 s = 18 requests per step: P95 is the 18th value of 18, the same as P99
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[1.8, 1.8, 1.8], window_s=10, e2e_p50_ms=500, e2e_p99_ms=1900,
                     slo=SLO, capacity={"peak_qps": 50})
    s = summarise(load_run(p))
    for r in s.steps:
        assert r.requests == 18 and r.insufficient and not r.valid
        assert r.e2e_p95_ms == r.e2e_p99_ms  # what was observed: the percentiles collapse
        assert r.e2e_p99_ci_ms[1] is None and r.e2e_p95_ci_ms[1] is None  # ... and cannot be bounded
        assert "insufficient: 18 measured request(s) < 100 (load.min_requests)" in r.conclusion
    assert s.capacity.per_node_rps is None and s.knee.value is None
    assert s.plan.nodes is None and "no valid step" in s.plan.refused
    assert s.outcome.decision_complete is False
    assert any("fewer than 100 measured requests" in w for w in s.warnings)


def test_min_requests_comes_from_the_scenario_and_the_flag(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], window_s=10, slo=SLO, load={"min_requests": 40})
    s = summarise(load_run(p))
    assert [r.valid for r in s.steps] == [True, True, True]  # 50, 100, 200 requests ≥ 40
    s = summarise(load_run(p, overrides={"min_requests": 150}))
    assert [r.valid for r in s.steps] == [False, False, True] and s.min_requests == 150


def test_interrupted_run_never_plans_from_its_two_request_step(tmp_path):
    # Seen: a run stopped two requests into a step planned "136 node(s)" from it.
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[10, 20, 0.2], window_s=10, slo=SLO,
                     e2e_p50_ms=[400, 500, 100], e2e_p99_ms=[500, 700, 120],
                     step_extra=[{}, {}, {"interrupted": True}], capacity={"peak_qps": 100, "redundancy": 0},
                     meta={"model": "m", "complete": False, "incomplete_reason": "interrupted (Ctrl-C / SIGTERM)"})
    s = summarise(load_run(p))
    last = s.steps[2]
    assert last.requests == 2 and not last.valid
    assert any("interrupted" in x for x in last.invalid_reasons) and last.insufficient
    assert s.capacity.excluded_steps == [2] and s.capacity.per_node_rps == pytest.approx(20)
    assert s.plan.nodes == 8  # ceil(100 × 1.5 / 20) from the valid steps, never from 2 requests
    r = capacity("analyze", str(p), "--quiet")
    assert r.returncode == 1, r.stderr  # the run is incomplete: the decision could not be completed
    assert "the decision could not be completed" in r.stderr and "incomplete" in r.stderr
    # the plain answer, the console's first line, says so before any number
    assert r.stdout.splitlines()[0].startswith("Decision not completed: the run is incomplete (interrupted")


def test_only_an_interrupted_two_request_step_refuses_the_plan(tmp_path):
    p = make_results(tmp_path, levels=[8], rps=[0.2], window_s=10, slo=SLO, step_extra=[{"interrupted": True}],
                     capacity={"peak_qps": 100}, meta={"model": "m", "complete": False})
    r = capacity("analyze", str(p), "--quiet")
    assert r.returncode == 1
    assert "Plan: refused" in r.stdout and "node(s)" not in r.stdout.split("Plan: refused")[1].splitlines()[0]
    s = json.loads((p / "summary.json").read_text())  # the analysis still wrote what it could
    assert s["plan"]["nodes"] is None and s["plan"]["refused"]


def test_event_loop_lag_over_the_scenario_threshold_makes_a_step_client_limited(tmp_path):
    lag = [{"loop_lag_p99_ms": 3.0}, {"loop_lag_p99_ms": 12.0}, {"loop_lag_p99_ms": 80.0}]
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], slo=SLO, step_extra=lag)
    rows = summarise(load_run(p)).steps
    assert [r.client_limited for r in rows] == [False, False, True]
    assert "load.max_loop_lag_p99_ms" in rows[2].client_limited_reason and "80 ms > 25 ms" in rows[2].client_limited_reason
    assert rows[2].conclusion.startswith("invalid: client limited")
    p2 = make_results(tmp_path / "lenient", levels=[1, 2, 4], rps=[5, 10, 20], slo=SLO, step_extra=lag,
                      load={"max_loop_lag_p99_ms": 100})
    assert all(r.valid for r in summarise(load_run(p2)).steps)


def test_membership_change_from_steps_json_invalidates_the_step(tmp_path):
    extra = [{}, {"membership_changed": True, "membership_reason": "worker 2 joined", "workers": 3}, {}]
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], slo=SLO, step_extra=extra)
    rows = summarise(load_run(p)).steps
    assert [r.valid for r in rows] == [True, False, True]
    assert rows[1].membership_reason == "worker 2 joined" and "swarm changed: worker 2 joined" in rows[1].conclusion


def test_lost_workers_in_meta_are_warned_and_invalidate_their_step(tmp_path):
    # Seen: meta.json listed workers_lost, yet warnings were [] and every step valid.
    # make_results: a step is 2 s warm-up + the window, then 1 s gap; with 60 s windows step 1 runs
    # from T0 + 63 to T0 + 125, so a loss at T0 + 78 falls inside it
    lost = [{"worker": 1, "client_id": "w1", "lost_unix": T0 + 78.0, "reason": "no heartbeat (Locust marked it missing)"}]
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[10, 20, 40], window_s=60, slo=SLO,
                     meta={"model": "m", "workers_lost": lost, "records": {"produced": 4210, "written": 4200, "lost": 10}})
    s = summarise(load_run(p))
    assert [r.valid for r in s.steps] == [True, False, True]
    assert "worker 1 lost at" in s.steps[1].membership_reason
    assert any(w.startswith("worker 1 was lost at") for w in s.warnings)
    assert any("10 request records were lost" in w for w in s.warnings)
    r = capacity("analyze", str(p), "--quiet")
    assert r.returncode == 0, r.stderr
    head = r.stdout.split("Capacity per node")[0]  # the console headline, before any number
    assert "worker 1 was lost" in head and "10 request records were lost" in head
    page = (p / "report.html").read_text()
    banner = page.split('<div class="alerts" id="alerts">')[1].split("</div></div>")[0]
    assert "worker 1 was lost" in banner and "records were lost" in banner
    assert "Lost worker: 1" in page


def test_a_worker_lost_at_an_unknown_time_leaves_the_steps_but_not_the_decision(tmp_path):
    # what the master writes for a worker killed before it sent its final record batch
    lost = [{"worker": 3, "client_id": None, "lost_unix": None, "reason": "stopped without its final record batch"}]
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[10, 20, 40], slo=SLO, meta={"model": "m", "workers_lost": lost})
    s = summarise(load_run(p))
    assert all(r.valid for r in s.steps)  # it cannot be placed in a step ...
    assert any("worker 3 was lost (time unknown" in w for w in s.warnings)
    assert s.outcome.decision_complete is False  # ... so the decision cannot stand on them
    assert "lost at an unknown time" in s.outcome.reasons[0]
    assert capacity("analyze", str(p), "--quiet", "--no-report").returncode == 1


def test_a_torn_last_line_is_skipped_and_counted(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], slo=SLO)
    whole = summarise(load_run(p)).steps[2].requests
    data = (p / "requests.jsonl").read_bytes()
    (p / "requests.jsonl").write_bytes(data + b'{"request_id": "cut", "step": 2, "warmup": false, "ok": tr')
    s = summarise(load_run(p))
    assert s.steps[2].requests == whole
    assert any("last line was cut" in w and "1 line skipped" in w for w in s.warnings)
    r = capacity("analyze", str(p), "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    # the pure-Python reader skips it the same way
    from capacity_plugins.analysis import records

    f = p / "requests.jsonl"
    limit = records.torn_tail(f)
    assert limit == len(data)
    df, _, _ = records._read_requests_orjson(f, True, limit)
    assert len(df) == len(load_run(p).requests)


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], slo=SLO)
    n = len(load_run(p).requests)
    (p / "requests.jsonl").write_bytes((p / "requests.jsonl").read_bytes().rstrip(b"\n"))
    run = load_run(p)
    assert len(run.requests) == n and not run.torn_lines


def test_an_empty_requests_file_exits_1_no_requests_recorded(tmp_path):
    # Seen: an empty requests.jsonl gave exit 0 and the verdict "observe".
    p = make_results(tmp_path, levels=[1, 2], rps=[0, 0], capacity={"peak_qps": 10})
    (p / "requests.jsonl").write_bytes(b"")
    r = capacity("analyze", str(p), "--quiet")
    assert r.returncode == 1
    assert "no requests were recorded" in r.stderr and "no requests were recorded" in r.stdout
    s = json.loads((p / "summary.json").read_text())
    assert s["outcome"] == {"decision_complete": False, "reasons": ["no requests were recorded"]}
    assert "Plan: refused" in r.stdout


def test_the_interval_that_cannot_show_the_slo_refuses_the_plan(tmp_path):
    # 2.2 % of requests over the E2E limit at every level, 100–120 requests per step: a P95 that
    # passes as a point, but no step can show that 95 % of requests stay under the limit
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[2, 2, 2], window_s=55, e2e_p50_ms=800, e2e_p99_ms=2300,
                     slo=SLO, capacity={"peak_qps": 10})
    s = summarise(load_run(p))
    assert all(r.slo_pass and r.slo["e2e_ms"].judgement == "uncertain" for r in s.steps)
    assert s.capacity.per_node_rps == pytest.approx(2) and s.capacity.per_node_rps_ci[0] == 0
    assert s.plan.nodes is None and "reaches 0" in s.plan.refused
    assert s.outcome.decision_complete is False


def test_a_wide_capacity_interval_refuses_the_plan_and_the_flag_can_narrow_the_rule(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=[800, 1000, 1800],
                     e2e_p99_ms=[1200, 1500, 3000], slo=SLO, capacity={"peak_qps": 30})
    s = summarise(load_run(p))
    assert s.plan.nodes is not None and s.plan.refused is None
    s = summarise(load_run(p, overrides={"max_capacity_interval": 0.01, "confidence": 0.99}))
    rel = s.capacity.relative_interval
    assert rel > 0.01 and s.plan.nodes is None
    # the refusal says it in words; the setting that decided it is listed apart
    assert "wider than the 1% a plan is sized from" in s.plan.refused
    # ... with what would narrow it: a step's intervals narrow with √n
    n = s.capacity.bracket_requests
    need = math.ceil(n * (rel / 0.01) ** 2)
    assert f"≈ {need:,} requests per step where the SLO is crossed (now {n:,})" in s.plan.refused
    assert Setting(key="verdict.max_capacity_interval", value=0.01,
            meaning="widest capacity interval, as a share of the capacity, a plan is sized from") in s.plan.settings
    assert "verdict.max_capacity_interval" in [x.key for x in s.verdict.settings]
    assert s.verdict.decision == "observe" and "no fleet size" in s.verdict.reasons[0]


def test_run_from_records_alone_still_analyses(tmp_path):
    # no scenario copy: defaults apply (min_requests 100), and nothing crashes
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], scenario=False)
    s = analyze(p)
    assert s.min_requests == 100 and [r.valid for r in s.steps] == [True, True, True]


def test_a_bracket_wider_than_a_doubling_is_the_interval(tmp_path):
    # Pass at 2 users, fail at 16: the interpolated point is a guess about an unmeasured bend, so
    # the interval spans the bracket's throughput and the plan refuses until the sweep is refined.
    p = make_results(tmp_path / "coarse", levels=[1, 2, 16], rps=[2, 4, 16], e2e_p50_ms=[800, 900, 3000],
                     e2e_p99_ms=[1000, 1100, 4000], slo=SLO, capacity={"peak_qps": 30})
    cap = summarise(load_run(p)).capacity
    assert cap.method == "interpolated" and (cap.last_pass_level, cap.first_fail_level) == (2, 16)
    lo, hi = cap.per_node_rps_ci
    assert lo <= cap.last_pass_rps + 1e-9 and hi >= cap.first_fail_rps - 1e-9
    assert any("wider than a doubling" in n for n in cap.notes)
    s = summarise(load_run(p))
    assert s.plan.nodes is None and "a plan is sized from" in s.plan.refused
    # more requests cannot narrow a bracket nobody measured inside: levels in between can
    assert "add levels between 2 and 16" in s.plan.refused
    assert "verdict.max_capacity_interval" in [x.key for x in s.plan.settings]
    # The same curve measured on a doubling grid keeps the measured interval.
    p = make_results(tmp_path / "fine", levels=[1, 2, 4], rps=[2, 4, 8], e2e_p50_ms=[800, 900, 3000],
                     e2e_p99_ms=[1000, 1100, 4000], slo=SLO, capacity={"peak_qps": 30})
    cap = summarise(load_run(p)).capacity
    assert not any("wider than a doubling" in n for n in cap.notes)
