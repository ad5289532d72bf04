"""Plan, cost and every verdict branch; worked examples' numbers reproduced."""

from __future__ import annotations

import pytest
from helpers.analysis_data import make_results

from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.analysis.plan import make_cost, make_plan
from capacity_plugins.contracts.planning import CapacityConfig

SLO_E2E = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}


def test_seed_000_nodes_50_qps_per_node_peak_300_safety_1_5_is_9(tmp_path):
    # a sweep whose SLO holds up to 50 rps on one node
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[12.5, 25, 50], slo=SLO_E2E,
                     capacity={"peak_qps": 300, "safety_factor": 1.5, "redundancy": 0})
    s = summarise(load_run(p))
    assert s["capacity"]["per_node_rps"] == pytest.approx(50)
    assert s["plan"]["nodes"] == 9 and s["plan"]["gpus"] == 9
    # N+1 and GPUs per node follow the formula, no hidden 70 % cap on an SLO-measured capacity
    plan = make_plan({"per_node_rps": 50.0}, CapacityConfig(peak_qps=300, safety_factor=1.5, redundancy=1, gpus_per_node=8))
    assert (plan["nodes"], plan["gpus"]) == (10, 80)


def test_seed_000_gpus_by_concurrency_200_over_20_is_10(tmp_path):
    p = make_results(tmp_path, levels=[5, 10, 20], rps=[5, 10, 20], slo=SLO_E2E,
                     capacity={"peak_concurrency": 200, "gpus_per_node": 1})
    s = summarise(load_run(p))
    assert s["capacity"]["per_node_concurrency"] == pytest.approx(20)
    assert s["plan"]["gpus_by_concurrency"] == 10


def test_70pct_trigger_and_cost_per_request_token_and_effective_output():
    cap = CapacityConfig(peak_qps=7.5, current_nodes=1, gpu_hour_usd=3.6, gpus_per_node=2, redundancy=0)
    plan = make_plan({"per_node_rps": 10.0}, cap)
    assert plan["peak_share_of_current_capacity"] == pytest.approx(0.75) and plan["trigger_70pct"] is True
    rows = [{"valid": True, "slo_pass": True, "level": 4, "output_tokens_mean": 100.0, "goodput_rps": 8.0,
             "good_requests": 80, "requests": 100}]
    cost = make_cost(rows, {"per_node_rps": 10.0}, cap)
    # node = 2 GPUs × 3.6 USD/h = 0.002 USD/s; 10 rps → 0.0002 USD per request
    assert cost["per_1k_requests_usd"] == pytest.approx(0.2)
    assert cost["per_1m_output_tokens_usd"] == pytest.approx(2.0)
    # only the outputs that succeeded and met the SLO carry the cost (8 of 10 per second)
    assert cost["per_effective_output_usd"] == pytest.approx(0.002 / 8)


SEED_001 = dict(levels=[1, 4, 8, 16], rps=[2, 7, 9, 9], e2e_p50_ms=[480, 620, 850, 1200],
                e2e_p99_ms=[490, 800, 1500, 2600], slo=SLO_E2E)


def _verdict(tmp_path, **kw):
    return summarise(load_run(make_results(tmp_path, **kw)))["verdict"]


def test_verdict_scale_gpu_saturated_and_p99_over_2s_at_peak(tmp_path):
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8],
                 capacity={"peak_qps": 30, "current_nodes": 2}, **SEED_001)
    assert v["decision"] == "scale" and v["bottleneck"] == "gpu"
    assert any("2 s" in r for r in v["reasons"])


def test_verdict_dont_scale_yet_when_fleet_carries_the_peak(tmp_path):
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], capacity={"peak_qps": 10, "current_nodes": 4}, **SEED_001)
    assert v["decision"] == "dont_scale_yet" and "carries the peak" in v["reasons"][0]


def test_verdict_dont_scale_yet_when_gpu_idles_while_latency_misses_slo(tmp_path):
    v = _verdict(tmp_path, gpu_util=[10, 15, 20, 22], waiting=[0, 0, 1, 2], capacity={"peak_qps": 100, "current_nodes": 1},
                 **SEED_001)
    assert v["decision"] == "dont_scale_yet"
    assert "not the bottleneck" in v["reasons"][0] and v["bottleneck"] == "feeding"


def test_verdict_observe_between_70_and_100_pct(tmp_path):
    # capacity 9 rps/node × 2 nodes = 18; peak 15 = 83 %
    v = _verdict(tmp_path, gpu_util=[35, 72, 89, 91], capacity={"peak_qps": 15, "current_nodes": 2}, **SEED_001)
    assert v["decision"] == "observe" and "70 %" in v["reasons"][0]


def test_verdict_observe_without_telemetry(tmp_path):
    v = _verdict(tmp_path, capacity={"peak_qps": 100, "current_nodes": 1}, **SEED_001)
    assert v["decision"] == "observe" and "telemetry" in v["reasons"][0]


def test_verdict_observe_with_too_few_valid_steps(tmp_path):
    v = _verdict(tmp_path, levels=[1, 2], rps=[2, 4], gpu_util=[90, 95], capacity={"peak_qps": 100})
    assert v["decision"] == "observe" and "valid step" in v["reasons"][0]


def test_verdict_observe_without_forecast_and_memory_bottleneck_hint(tmp_path):
    v = _verdict(tmp_path, gpu_util=[30, 40, 45, 45], kv_cache=[0.3, 0.7, 0.95, 0.99], waiting=[0, 5, 9, 20], **SEED_001)
    assert v["decision"] == "observe" and "forecast" in v["reasons"][0]
    assert v["bottleneck"] == "memory"


def test_checklists_mark_what_only_a_person_can_confirm(tmp_path):
    p = make_results(tmp_path, gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8],
                     capacity={"peak_qps": 30, "current_nodes": 2, "gpu_hour_usd": 2.5}, **SEED_001)
    items = {i["id"]: i for i in summarise(load_run(p))["checklist"]}
    assert len([i for i in items if i.startswith("review.")]) == 7
    assert len([i for i in items if i.startswith("pre.")]) == 6
    assert items["review.1_quality_baseline"]["status"] == "needs_human"
    assert items["review.7_compliance"]["status"] == "needs_human"
    assert items["review.2_load_test_complete"]["status"] == "pass"
    assert items["review.4_versions_locked"]["status"] == "pass"
    assert items["pre.4_resource_bounds"]["status"] == "pass"
    assert items["pre.5_cost_per_effective_output"]["status"] == "needs_human"
    assert all(i["evidence"] for i in items.values())
