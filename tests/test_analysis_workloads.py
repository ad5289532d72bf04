"""The analysis of a run with workload classes, on synthetic folders where the answer is known:
each class judged by its own SLO, the mix's capacity set by the class that fails first."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.analysis_data import make_results, with_workloads

from capacity_plugins import analyze
from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.contracts.summary import EvidenceLevels, Setting
from capacity_plugins.errors import UserError

LEVELS, RPS = [1, 2, 4, 8], [5, 10, 20, 40]
TOP_SLO = {"ttft_p95_ms": 2000, "tpot_p95_ms": None, "e2e_p95_ms": None}
# Every request of a class in a step has the same latency: its P95 is exactly this number.
CLASSES = {
    "chat": {"weight": 2, "ttft_ms": [100, 200, 400, 1500]},  # TTFT ≤ 1 s: fails at 8 users
    "rag": {"weight": 1, "ttft_ms": [1000, 2000, 4000, 6000]},  # TTFT ≤ 3 s: fails at 4 users
    "batch": {"weight": 1, "ttft_ms": [9000] * 4, "e2e_ms": [20000] * 4},  # E2E only: never fails
}
WORKLOADS = [
    {"name": "chat", "weight": 2, "slo": {"ttft_p95_ms": 1000}},
    {"name": "rag", "weight": 1, "slo": {"ttft_p95_ms": 3000}},
    {"name": "batch", "weight": 1, "slo": {"ttft_p95_ms": None, "e2e_p95_ms": 60000}},
]


def mix_folder(tmp_path, **kw):
    p = make_results(tmp_path, levels=LEVELS, rps=RPS, e2e_p50_ms=500, e2e_p99_ms=600, slo=TOP_SLO,
                     capacity={"peak_qps": 60, "current_nodes": 1}, load={"min_requests": 50}, **kw)
    return with_workloads(p, CLASSES, WORKLOADS)


def test_the_class_that_fails_first_limits_the_mix(tmp_path):
    s = summarise(load_run(mix_folder(tmp_path)))
    classes = {k.name: k for k in s.workloads.classes}
    # rag: its TTFT P95 crosses 3 s halfway between 2 users (2 s, 10 rps) and 4 users (4 s, 20 rps)
    rag = classes["rag"].capacity
    assert rag.method == "interpolated" and rag.limiting_slo == "ttft_ms"
    assert rag.per_node_rps == pytest.approx(15.0) and rag.per_node_concurrency == pytest.approx(3.0)
    # chat: 400 ms at 4 users (20 rps), 1.5 s at 8 (40 rps); 1 s is 6/11 of the way
    chat = classes["chat"].capacity
    assert chat.per_node_rps == pytest.approx(20 + 20 * 600 / 1100)
    assert classes["batch"].capacity.method == "never_failed"
    assert s.workloads.order == ["rag", "chat", "batch"] and s.workloads.limiting == "rag"
    # the mix (what plan and verdict use) is rag's
    cap = s.capacity
    assert cap.per_node_rps == pytest.approx(15.0) and cap.limiting_workload == "rag"
    assert cap.limiting_slo == "ttft_ms" and cap.first_fail_level == 4
    assert s.plan.nodes == 60 * 1.5 // 15 + 1  # ceil(60 × 1.5 / 15) + redundancy
    # the class shares follow the weights 2:1:1
    assert classes["chat"].share == pytest.approx(0.5, abs=0.01)


def test_each_step_is_judged_as_the_mix_and_per_class(tmp_path):
    s = summarise(load_run(mix_folder(tmp_path)))
    rows = s.steps
    # the top-level TTFT limit (2 s) alone would fail every step (batch's TTFT is 9 s): it does not judge
    assert [r.slo_pass for r in rows] == [True, True, False, False]
    assert [r.workloads["rag"].slo_judgement for r in rows] == ["pass", "pass", "fail", "fail"]
    assert [r.workloads["chat"].slo_judgement for r in rows] == ["pass", "pass", "pass", "fail"]
    r2 = rows[2]
    assert set(r2.slo) == {"chat.ttft_ms", "rag.ttft_ms", "batch.e2e_ms"}
    rag = r2.workloads["rag"]
    assert rag.ttft_p95_ms == pytest.approx(4000) and rag.ttft_p95_ci_ms == [pytest.approx(4000)] * 2
    assert rag.requests == pytest.approx(20 * 60 / 4, abs=1)
    assert rag.goodput_rps == 0 and r2.workloads["chat"].goodput_rps == pytest.approx(10, abs=0.1)
    # the step's goodput counts requests that met their own class's SLO: chat's and batch's here
    assert r2.goodput_rps == pytest.approx(15, abs=0.1)
    assert s.verdict.evidence_levels == EvidenceLevels(highest_passing=2, first_failing=4, decided_at=4)


def test_the_verdict_names_the_class_and_limit_that_missed(tmp_path):
    # an idle GPU while the SLO fails: the verdict quotes what missed, class by class
    s = summarise(load_run(mix_folder(tmp_path, gpu_util=[10] * 4, waiting=[0] * 4)))
    assert s.verdict.decision == "dont_scale_yet"
    reason = s.verdict.reasons[0]
    assert "at 4 users the SLO fails (rag: TTFT p95 is 4 s against a 3 s limit)" in reason
    assert Setting(key="slo.ttft_p95_ms", value=3000.0, meaning="TTFT limit (ms)") in s.verdict.settings
    assert "chat:" not in reason  # chat still met its own SLO at 4 users


def test_a_class_short_of_min_requests_is_insufficient_in_that_step(tmp_path):
    p = make_results(tmp_path, levels=LEVELS, rps=RPS, slo=TOP_SLO, load={"min_requests": 60})
    classes = {"chat": {"weight": 9, "ttft_ms": [100] * 4}, "rare": {"weight": 1, "ttft_ms": [100] * 4}}
    with_workloads(p, classes, [{"name": "chat", "weight": 9}, {"name": "rare", "weight": 1}])
    s = summarise(load_run(p))
    first = s.steps[0]  # 300 requests: rare has 30 of them
    assert first.valid and first.workloads["rare"].requests == 30
    assert first.workloads["rare"].insufficient and not first.workloads["rare"].valid
    assert not first.workloads["chat"].insufficient
    assert first.slo_judgement == "uncertain"  # the mix cannot show rare passes there
    rare = next(k for k in s.workloads.classes if k.name == "rare")
    assert rare.insufficient_levels == [1] and rare.capacity.excluded_steps == [0]
    assert any("class rare has fewer than 60" in w for w in s.warnings)


def test_the_report_has_a_workload_classes_section(tmp_path):
    p = mix_folder(tmp_path)
    s = analyze(p)
    md = (p / "summary.md").read_text()
    html = (p / "report.html").read_text()
    assert "## Workload classes" in md and 'id="workloads"' in html
    assert "limited by class rag" in md
    for text in (md, html):
        assert "rag" in text and "batch" in text and "E2E P95" in text
    assert json.loads((p / "summary.json").read_text())["workloads"]["limiting"] == "rag"
    assert s.verdict.decision in ("observe", "scale", "dont_scale_yet")


def test_a_what_if_on_the_top_level_slo_reaches_classes_that_did_not_set_it(tmp_path):
    p = mix_folder(tmp_path)
    # chat and rag set their own TTFT limit; batch inherits tpot from the top level: give it one it misses
    base = summarise(load_run(p))
    s = summarise(load_run(p, {"tpot_p95_ms": 1.0}))
    assert base.capacity.limiting_workload == "rag"
    assert s.capacity.method == "fails_at_lowest_load"  # every class now misses TPOT ≤ 1 ms
    batch = next(k for k in s.workloads.classes if k.name == "batch")
    assert batch.slo.tpot_p95_ms == 1.0 and batch.slo.e2e_p95_ms == 60000


def test_a_run_without_classes_is_analysed_as_before(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=[800, 1000, 3000],
                     e2e_p99_ms=[800, 1000, 3000])
    # an old folder: records carry the `class: "default"` placeholder instead of `workload`
    lines = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    (p / "requests.jsonl").write_text("".join(json.dumps({**{k: v for k, v in r.items() if k != "workload"},
                                                          "class": "default"}) + "\n" for r in lines))
    s = summarise(load_run(p))
    assert s.workloads is None and "workloads" not in s.steps[0].to_json()
    assert s.capacity.per_node_rps == pytest.approx(15.0) and "limiting_workload" not in s.capacity.to_json()


def test_a_bad_workloads_section_in_the_copy_is_one_line(tmp_path):
    p = mix_folder(tmp_path)
    doc = yaml.safe_load((p / "scenario.yaml").read_text())
    doc["workloads"][1]["weight"] = 0
    (p / "scenario.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=r"scenario.yaml: workloads\[1\]\.weight: Input should be greater than 0"):
        load_run(p)


def test_a_class_with_no_request_in_a_step_makes_it_uncertain_not_failed(tmp_path):
    p = make_results(tmp_path, levels=LEVELS, rps=RPS, slo=TOP_SLO, load={"min_requests": 10})
    classes = {"chat": {"weight": 3, "ttft_ms": [100] * 4}, "rare": {"weight": 1, "ttft_ms": [100] * 4}}
    with_workloads(p, classes, [{"name": "chat", "weight": 3}, {"name": "rare", "weight": 1}])
    # the first step drew no rare request at all
    lines = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    (p / "requests.jsonl").write_text("".join(json.dumps({**r, "workload": "chat"} if r["step"] == 0 else r) + "\n"
                                              for r in lines))
    first, second = summarise(load_run(p)).steps[:2]
    assert first.workloads["rare"].requests == 0 and set(first.slo) == {"chat.ttft_ms"}
    assert first.slo_pass and first.slo_judgement == "uncertain"  # rare cannot show it passes there
    assert second.slo_judgement == "pass"


def test_a_class_too_thin_in_every_step_leaves_the_mix_unknown_and_the_report_says_so(tmp_path):
    p = make_results(tmp_path, levels=LEVELS, rps=[5, 6, 7, 8], slo=TOP_SLO, load={"min_requests": 100})
    classes = {"chat": {"weight": 9, "ttft_ms": [100] * 4}, "rare": {"weight": 1, "ttft_ms": [100] * 4}}
    with_workloads(p, classes, [{"name": "chat", "weight": 9}, {"name": "rare", "weight": 1}])
    s = analyze(p)  # rare has 30–48 requests per step: insufficient in all of them
    assert s.capacity.per_node_rps is None and s.capacity.limiting_workload == "rare"
    md = (p / "summary.md").read_text()
    assert "Mix: the mix's capacity is the load at which any class first misses its own SLO: unknown (class rare " \
           "has no valid step" in md
    assert "rare" in (p / "report.html").read_text()
