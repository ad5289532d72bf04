"""Repeat sets: `capacity analyze SET` analyses each repeat and reports the run-to-run spread."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.analysis_data import make_queue_results, make_repeat_set, make_results
from helpers.processes import capacity

SLO = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 400.0}


def test_a_set_reports_the_run_to_run_spread(tmp_path):
    s = make_repeat_set(tmp_path / "set", 3, lambda p, i: make_queue_results(
        p, levels=[1, 2, 4, 8], slots=4, window_s=20, service_cv=1.0, seed=40 + i, slo=SLO,
        capacity={"peak_qps": 100, "redundancy": 0}))
    r = capacity("analyze", str(s), "--quiet", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((s / "summary.json").read_text())
    assert summary["kind"] == "repeat_set" and [x["name"] for x in summary["repeats"]] == ["repeat-1", "repeat-2", "repeat-3"]
    per_repeat = [json.loads((s / f"repeat-{i}" / "summary.json").read_text()) for i in (1, 2, 3)]
    # per level: the spread of what each repeat measured, with its t interval
    lv4 = next(e for e in summary["levels"] if e["level"] == 4)
    rps = [next(r["rps"] for r in x["steps"] if r["level"] == 4) for x in per_repeat]
    assert lv4["rps"]["values"] == pytest.approx(rps)
    assert lv4["rps"]["mean"] == pytest.approx(np.mean(rps)) and lv4["rps"]["sd"] == pytest.approx(np.std(rps, ddof=1))
    assert lv4["rps"]["ci"][0] < lv4["rps"]["mean"] < lv4["rps"]["ci"][1]
    assert lv4["rps"]["min"] == min(rps) and lv4["rps"]["max"] == max(rps)
    # capacity and knee over the repeats
    caps = [x["capacity"]["per_node_rps"] for x in per_repeat]
    assert summary["capacity"]["values"] == pytest.approx(caps)
    assert summary["capacity"]["per_node_rps"] == pytest.approx(np.mean(caps))
    assert summary["capacity"]["interval_kind"] == "run_to_run"
    assert summary["knee"]["values"] == [x["knee"]["value"] for x in per_repeat]
    # the set's plan sizes from the mean, within the run-to-run interval
    plan = summary["plan"]
    assert plan["nodes"] is not None and plan["nodes_interval"][0] <= plan["nodes"] <= plan["nodes_interval"][1]
    for f in ("summary.md", "report.html"):
        assert (s / f).stat().st_size > 0
        assert (s / "repeat-1" / f).stat().st_size > 0  # every repeat keeps its own report
    assert "Run-to-run spread per level" in (s / "summary.md").read_text()
    # the plain answer first, then the set's headline
    lines = r.stdout.splitlines()
    assert lines[0].startswith("One node serves ") and "(mean of 3 repeats)" in lines[0]
    assert "repeats" in lines[lines.index("") + 1]


def test_the_library_call_the_runner_makes_analyses_a_set(tmp_path):
    from capacity_plugins import analyze

    # `capacity run --repeat N` writes repeats.json with the scenario's name beside the list
    s = make_repeat_set(tmp_path / "set", 2, lambda p, i: make_results(p, levels=[1, 2, 4], rps=[5, 10, 20]))
    doc = json.loads((s / "repeats.json").read_text())
    (s / "repeats.json").write_text(json.dumps({"scenario": "synthetic", **doc}))
    summary = analyze(s)
    assert summary.kind == "repeat_set" and (s / "summary.json").exists() and (s / "repeat-2" / "report.html").exists()
    # ... and gates it with the rule a single run's summary uses (capacity run --fail-on-slo)
    from capacity_plugins.analysis.gate import gate

    assert gate(summary, True, "observe") == ["verdict gate: verdict is observe"]  # no peak: observe; SLO held
    strict = analyze(s, overrides={"e2e_p95_ms": 100.0})
    assert gate(strict, True, None) and "SLO missed at level(s) [1.0, 2.0, 4.0]" in gate(strict, True, None)[0]


def test_repeats_that_disagree_do_not_decide(tmp_path):
    slo = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}

    def make(p, i):
        # one repeat measured a fleet that carries the peak, the other one that does not
        rps = [5, 10, 20] if i == 0 else [2, 4, 8]
        make_results(p, levels=[1, 2, 4], rps=rps, slo=slo, gpu_util=[30, 60, 90],
                     capacity={"peak_qps": 12, "current_nodes": 1, "redundancy": 0, "safety_factor": 1.0})

    s = make_repeat_set(tmp_path / "set", 2, make)
    r = capacity("analyze", str(s), "--quiet", "--no-report", timeout=180)
    summary = json.loads((s / "summary.json").read_text())
    assert [x["decision"] for x in summary["repeats"]] == ["dont_scale_yet", "observe"]
    assert summary["verdict"]["decision"] == "observe"
    # 20 vs 8 rps from two repeats: the t interval of the mean is far too wide to size a fleet
    assert summary["plan"]["nodes"] is None and summary["plan"]["refused"]
    assert r.returncode == 1 and "plan refused" in r.stderr


def test_a_bad_repeats_file_is_exit_2_before_anything_is_written(tmp_path):
    s = make_repeat_set(tmp_path / "set", 2, lambda p, i: make_results(p, levels=[1, 2, 4], rps=[5, 10, 20]))
    (s / "repeats.json").write_text(json.dumps({"repeats": ["repeat-1", "../elsewhere"]}))
    r = capacity("analyze", str(s), timeout=180)
    assert r.returncode == 2 and "repeats.json: repeats[1]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # a corrupt repeat: nothing written anywhere, not even for the good repeat before it
    (s / "repeats.json").write_text(json.dumps({"repeats": ["repeat-1", "repeat-2"]}))
    lines = (s / "repeat-2" / "requests.jsonl").read_text().splitlines()
    lines[3] = lines[3][:30]
    (s / "repeat-2" / "requests.jsonl").write_text("\n".join(lines) + "\n")
    r = capacity("analyze", str(s), timeout=180)
    assert r.returncode == 2 and "repeat-2/requests.jsonl line 4" in r.stderr
    assert not (s / "repeat-1" / "summary.json").exists() and not (s / "summary.json").exists()
