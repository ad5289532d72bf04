"""Plan, cost and every verdict branch; worked examples' numbers reproduced."""

from __future__ import annotations

import pytest
from helpers.analysis_data import make_results

from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.analysis.plan import make_cost, make_plan
from capacity_plugins.contracts.planning import CapacityConfig
from capacity_plugins.contracts.summary import Capacity, Setting, StepSummary

SLO_E2E = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}


def test_seed_000_nodes_50_qps_per_node_peak_300_safety_1_5_is_9(tmp_path):
    # a sweep whose SLO holds up to 50 rps on one node
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[12.5, 25, 50], slo=SLO_E2E,
                     capacity={"peak_qps": 300, "safety_factor": 1.5, "redundancy": 0})
    s = summarise(load_run(p))
    assert s.capacity.per_node_rps == pytest.approx(50)
    assert s.plan.nodes == 9 and s.plan.gpus == 9
    # N+1 and GPUs per node follow the formula, no hidden 70 % cap on an SLO-measured capacity
    plan = make_plan(Capacity(per_node_rps=50.0), CapacityConfig(peak_qps=300, safety_factor=1.5, redundancy=1, gpus_per_node=8))
    assert (plan.nodes, plan.gpus) == (10, 80)


def test_seed_000_gpus_by_concurrency_200_over_20_is_10(tmp_path):
    p = make_results(tmp_path, levels=[5, 10, 20], rps=[5, 10, 20], slo=SLO_E2E,
                     capacity={"peak_concurrency": 200, "gpus_per_node": 1})
    s = summarise(load_run(p))
    assert s.capacity.per_node_concurrency == pytest.approx(20)
    assert s.plan.gpus_by_concurrency == 10


def test_70pct_trigger_and_cost_per_request_token_and_effective_output():
    cap = CapacityConfig(peak_qps=7.5, current_nodes=1, gpu_hour_usd=3.6, gpus_per_node=2, redundancy=0)
    plan = make_plan(Capacity(per_node_rps=10.0), cap)
    assert plan.peak_share_of_current_capacity == pytest.approx(0.75) and plan.trigger_reached is True
    assert plan.trigger_share == 0.7  # the documented default (verdict.trigger_share)
    rows = [StepSummary(valid=True, slo_pass=True, level=4, output_tokens_mean=100.0, goodput_rps=8.0,
                        good_requests=80, requests=100)]
    cost = make_cost(rows, Capacity(per_node_rps=10.0), cap)
    # node = 2 GPUs × 3.6 USD/h = 0.002 USD/s; 10 rps → 0.0002 USD per request
    assert cost.per_1k_requests_usd == pytest.approx(0.2)
    assert cost.per_1m_output_tokens_usd == pytest.approx(2.0)
    # only the outputs that succeeded and met the SLO carry the cost (8 of 10 per second)
    assert cost.per_effective_output_usd == pytest.approx(0.002 / 8)


SEED_001 = dict(levels=[1, 4, 8, 16], rps=[2, 7, 9, 9], e2e_p50_ms=[480, 620, 850, 1200],
                e2e_p99_ms=[490, 800, 1500, 2600], slo=SLO_E2E)


def _verdict(tmp_path, **kw):
    return summarise(load_run(make_results(tmp_path, **kw))).verdict


def test_verdict_scale_gpu_saturated_and_p99_over_2s_at_peak(tmp_path):
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8],
                 capacity={"peak_qps": 30, "current_nodes": 2}, **SEED_001)
    assert v.decision == "scale" and v.bottleneck == "gpu"
    assert any("2 s" in r for r in v.reasons)


def test_verdict_dont_scale_yet_when_fleet_carries_the_peak(tmp_path):
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], capacity={"peak_qps": 10, "current_nodes": 4}, **SEED_001)
    assert v.decision == "dont_scale_yet" and "carries the peak" in v.reasons[0]


def test_verdict_dont_scale_yet_when_gpu_idles_while_latency_misses_slo(tmp_path):
    v = _verdict(tmp_path, gpu_util=[10, 15, 20, 22], waiting=[0, 0, 1, 2], capacity={"peak_qps": 100, "current_nodes": 1},
                 **SEED_001)
    assert v.decision == "dont_scale_yet"
    assert "not the bottleneck" in v.reasons[0] and v.bottleneck == "feeding"


def test_requests_deferred_for_their_lora_adapter_are_not_a_reason_to_add_gpus(tmp_path):
    # An idle GPU and a long queue, all of it deferred (vLLM: adapters beyond --max-loras): the same
    # queue waiting for batch slots would not clear the GPU; deferred requests do, and say why.
    kw = dict(gpu_util=[10, 15, 20, 22], waiting=[0, 4, 9, 14], capacity={"peak_qps": 100, "current_nodes": 1},
              **SEED_001)
    v = _verdict(tmp_path / "deferred", deferred=[0, 4, 9, 14], **kw)
    assert (v.decision, v.rule, v.bottleneck) == ("dont_scale_yet", "gpu_not_the_bottleneck", "adapters")
    assert "14.0 requests wait for their LoRA adapter to join a batch, 0.0 for a batch slot" in v.reasons[0], v.reasons
    assert "--max-loras" in v.measure_next[0] and any("LoRA adapter to join" in h for h in v.bottleneck_hints or [])
    queued = _verdict(tmp_path / "queued", **kw)
    assert queued.rule != "gpu_not_the_bottleneck" and queued.bottleneck == "feeding"
    assert not any("LoRA" in h for h in queued.bottleneck_hints or [])


def test_a_step_too_short_to_show_the_slo_says_how_many_requests_would(tmp_path):
    # 60 requests at 2 users, all within E2E ≤ 2 s: a pass as measured, but 60 of 60 cannot show
    # 95 % at 95 % confidence (the exact low end is 0.025^(1/60) = 0.94), so the capacity interval
    # reaches 0 and the plan refuses. What to do is a number: the 72 that can (0.025^(1/72) ≥ 0.95).
    kw = dict(levels=[2, 6, 12], rps=[1.0, 3.0, 6.0], e2e_p50_ms=[400, 1500, 3000], e2e_p99_ms=[600, 2600, 5000],
              slo=SLO_E2E, capacity={"peak_qps": 10, "current_nodes": 1}, gpu_util=[20, 50, 90],
              load={"min_requests": 50})
    s = summarise(load_run(make_results(tmp_path / "short", window_s=60.0, **kw)))
    assert s.capacity.per_node_rps_ci is not None and s.capacity.per_node_rps_ci[0] == 0.0
    assert s.capacity.requests_to_show == 72 and s.verdict.rule == "plan_refused"
    assert s.verdict.measure_next[0].startswith("lengthen the steps until every step holds at least 72 successful"), \
        s.verdict.measure_next
    assert any("its 60 requests cannot show 95% within the limits" in n for n in s.capacity.notes), s.capacity.notes
    # 100 requests a step: the same latencies can show it, and nothing is said about the count
    s = summarise(load_run(make_results(tmp_path / "long", window_s=100.0, **kw)))
    assert s.capacity.requests_to_show is None and "requests_to_show" not in s.capacity.to_json()
    assert s.capacity.per_node_rps_ci is not None and s.capacity.per_node_rps_ci[0] > 0


def test_verdict_observe_between_70_and_100_pct(tmp_path):
    # capacity 9 rps/node × 2 nodes = 18; peak 15 = 83 %
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], capacity={"peak_qps": 15, "current_nodes": 2}, **SEED_001)
    assert v.decision == "observe" and "above the 70% at which planning starts" in v.reasons[0]
    assert Setting(key="verdict.trigger_share", value=0.7, meaning="share of the current capacity at which planning starts") in v.settings


def test_verdict_observe_without_telemetry(tmp_path):
    v = _verdict(tmp_path, capacity={"peak_qps": 100, "current_nodes": 1}, **SEED_001)
    assert v.decision == "observe" and "telemetry" in v.reasons[0]


def test_verdict_observe_with_too_few_valid_steps(tmp_path):
    v = _verdict(tmp_path, levels=[1, 2], rps=[2, 4], gpu_util=[90, 95], capacity={"peak_qps": 100})
    assert v.decision == "observe" and "valid step" in v.reasons[0]


def test_verdict_observe_without_forecast_and_memory_bottleneck_hint(tmp_path):
    v = _verdict(tmp_path, gpu_util=[30, 40, 45, 45], kv_cache=[0.3, 0.7, 0.95, 0.99], waiting=[0, 5, 9, 20], **SEED_001)
    assert v.decision == "observe" and "forecast" in v.reasons[0]
    assert v.bottleneck == "memory"


def test_checklists_mark_what_only_a_person_can_confirm(tmp_path):
    p = make_results(tmp_path, gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8],
                     capacity={"peak_qps": 30, "current_nodes": 2, "gpu_hour_usd": 2.5}, **SEED_001)
    items = {i.id: i for i in summarise(load_run(p)).checklist}
    assert len([i for i in items if i.startswith("review.")]) == 7
    assert len([i for i in items if i.startswith("pre.")]) == 6
    assert items["review.1_quality_baseline"].status == "needs_human"
    assert items["review.7_compliance"].status == "needs_human"
    assert items["review.2_load_test_complete"].status == "pass"
    assert items["review.4_versions_locked"].status == "pass"
    assert items["pre.4_resource_bounds"].status == "pass"
    assert items["pre.5_cost_per_effective_output"].status == "needs_human"
    assert all(i.evidence for i in items.values())


def test_verdict_speaks_the_users_slo_not_a_constant(tmp_path):
    # Seen: "E2E P99 5.4 s > 2 s at the forecast peak" from a 2 s constant, whatever the SLO said.
    slo = {"ttft_p95_ms": 1500.0, "tpot_p95_ms": None, "e2e_p95_ms": None}
    v = _verdict(tmp_path, levels=[1, 4, 8, 16], rps=[2, 7, 9, 9], e2e_p50_ms=[480, 620, 850, 1200],
                 e2e_p99_ms=[490, 800, 1500, 2600], ttft_share=0.8, slo=slo, gpu_util=[35, 72, 89, 91],
                 waiting=[0, 1, 3, 8], capacity={"peak_qps": 30, "current_nodes": 2})
    assert v.decision == "scale"
    text = " ".join(v.reasons)
    assert "TTFT p95" in text and "against a 1.5 s limit" in text and "forecast peak" in text
    assert Setting(key="slo.ttft_p95_ms", value=1500.0, meaning="TTFT limit (ms)") in v.settings
    assert "2 s" not in text and "E2E" not in text


def test_verdict_thresholds_come_from_the_scenario_verdict_section(tmp_path):
    base = dict(gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8], capacity={"peak_qps": 30, "current_nodes": 2}, **SEED_001)
    assert _verdict(tmp_path / "default", **base).decision == "scale"
    v = _verdict(tmp_path / "busy", scenario_extra={"verdict": {"gpu_busy_pct": 95}}, **base)
    assert v.decision == "observe" and "GPU is busy 91 % at 16 users, not above the 95 % counted busy" in v.reasons[0]
    assert Setting(key="verdict.gpu_busy_pct", value=95.0, meaning="GPU counted busy above this (%)") in v.settings
    v = _verdict(tmp_path / "p99", scenario_extra={"verdict": {"peak_e2e_p99_ms": 3000}}, **base)
    assert v.decision == "observe" and any("within the 3 s limit at the forecast peak" in r for r in v.reasons)
    assert "verdict.peak_e2e_p99_ms" in [x.key for x in v.settings]
    # the flag wins over the scenario
    p = make_results(tmp_path / "flag", scenario_extra={"verdict": {"gpu_busy_pct": 95}}, **base)
    assert summarise(load_run(p, overrides={"gpu_busy_pct": 80})).verdict.decision == "scale"
    # and a bad value is one line naming the key
    from capacity_plugins.errors import UserError

    bad = make_results(tmp_path / "bad", scenario_extra={"verdict": {"trigger_share": 7}}, **base)
    with pytest.raises(UserError, match="scenario.yaml: verdict.trigger_share"):
        load_run(bad)


def test_trigger_share_is_the_scenarios(tmp_path):
    # capacity 9 rps/node × 2 nodes = 18; peak 15 = 83 %: between 70 % and 100 % by default
    kw = dict(gpu_util=[35, 72, 89, 91], capacity={"peak_qps": 15, "current_nodes": 2}, **SEED_001)
    assert "70%" in _verdict(tmp_path / "a", **kw).reasons[0]
    v = _verdict(tmp_path / "b", scenario_extra={"verdict": {"trigger_share": 0.9}}, **kw)
    assert not any("trigger_share" in r for r in v.reasons)


def test_simulated_gpu_readings_are_called_simulated(tmp_path):
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8], capacity={"peak_qps": 30, "current_nodes": 2},
                 scenario_extra={"target": {"url": "embedded", "simulator": {"max_num_seqs": 8}}}, **SEED_001)
    assert v.decision == "scale" and "simulated GPU busy" in v.reasons[0]
    assert any("simulated, not measured" in h for h in v.bottleneck_hints)


def test_an_slo_that_surely_fails_at_the_lowest_load_is_an_answer_not_a_refusal(tmp_path):
    # every request 3 s against a 2 s E2E limit: capacity 0 at both ends of its interval
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=3000, e2e_p99_ms=3000, slo=SLO_E2E,
                     capacity={"peak_qps": 30})
    s = summarise(load_run(p))
    assert s.capacity.per_node_rps == 0 and s.capacity.per_node_rps_ci == [0, 0]
    assert s.plan.nodes is None and s.plan.refused is None and "no number of nodes" in s.plan.infeasible
    assert s.outcome.decision_complete is True  # exit 0 (3 under --fail-on-slo), not 1
    from capacity_plugins.analysis.gate import gate

    assert gate(s, True, None)  # the SLO gate fails: the service is too slow, and that is known


def test_cost_carries_the_capacity_interval():
    cap = CapacityConfig(gpu_hour_usd=3.6, gpus_per_node=1)
    cost = make_cost([], Capacity(per_node_rps=10.0, per_node_rps_ci=[8.0, 12.5]), cap)
    # one GPU at 3.6 USD/h = 0.001 USD/s: 0.1 USD per 1k requests at 10 rps, 0.08 at 12.5, 0.125 at 8
    assert cost.per_1k_requests_usd == pytest.approx(0.1)
    assert cost.per_1k_requests_ci_usd == pytest.approx([0.08, 0.125])
