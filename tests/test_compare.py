"""`capacity compare`: the before/after table of docs/capacity.md with a verdict per row."""

from __future__ import annotations

import json

from helpers.analysis_data import make_results
from helpers.processes import capacity

from capacity_plugins.analysis import analyze
from capacity_plugins.analysis.compare import compare, load_summary


def _pair(tmp_path):
    # a worked before/after example: QPS 9 → 18, P99 2600 → 1400 ms, P50 1200 → 680 ms, GPU 91 → 74 %
    before = make_results(tmp_path / "before", levels=[4, 8, 16], rps=[7, 9, 9], e2e_p50_ms=[620, 850, 1200],
                          e2e_p99_ms=[800, 1500, 2600], gpu_util=[72, 89, 91],
                          capacity={"gpu_hour_usd": 2.0})
    after = make_results(tmp_path / "after", levels=[4, 8, 16], rps=[7, 13, 18], e2e_p50_ms=[500, 560, 680],
                         e2e_p99_ms=[600, 900, 1400], gpu_util=[50, 65, 74],
                         capacity={"gpu_hour_usd": 2.0})
    analyze(before)
    analyze(after)
    return before, after


def test_before_after_rows_and_verdicts(tmp_path):
    before, after = _pair(tmp_path)
    c = compare(load_summary(before), load_summary(after))
    rows = {r["metric"]: r for r in c["rows"]}
    assert c["compared_level"] == 16
    assert rows["QPS at compared level"]["before"] == 9 and rows["QPS at compared level"]["after"] == 18
    assert rows["QPS at compared level"]["verdict"] == "better"
    assert rows["E2E P99 ms"]["verdict"] == "better" and rows["E2E P50 ms"]["verdict"] == "better"
    assert rows["cost per 1k requests USD"]["verdict"] == "better"
    assert rows["GPU util %"]["before"] == 91 and rows["GPU util %"]["after"] == 74
    assert rows["cache hit rate"]["verdict"] == "unknown"
    assert c["overall"] == "improved" and any("used better" in a for a in c["advice"])
    # the other way round is a regression, and QPS down with GPU down says: roll back
    back = compare(load_summary(after), load_summary(before))
    assert back["overall"] == "regressed"


def test_cli_prints_table_and_bad_input_exits_2(tmp_path):
    before, after = _pair(tmp_path)
    r = capacity("compare", str(before), str(after), "--out", str(tmp_path / "c.json"))
    assert r.returncode == 0, r.stderr
    assert "| metric | before | after | change | verdict |" in r.stdout and "Overall: improved" in r.stdout
    assert json.loads((tmp_path / "c.json").read_text())["overall"] == "improved"
    r = capacity("compare", str(before), str(tmp_path / "missing"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
