"""summary.json and meta.json as models (contracts/summary.py, contracts/meta.py).

- Files written before the models existed still load, and are written back with the same keys and
  values — the same JSON types too (an integer stays an integer): tests/data_results.
- Every key of those files is a field of a model (none read back as an unknown extra), and a fresh
  analysis writes none that is not.
- A key the analysis writes only in some cases is absent, not null, when it does not apply.
- docs/results-schema.md is what the models generate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from helpers.analysis_data import make_results
from helpers.paths import ROOT

from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.contracts import schema_doc
from capacity_plugins.contracts.document import Section, dumps_json
from capacity_plugins.contracts.meta import META_SCHEMA_VERSION, Meta
from capacity_plugins.contracts.summary import (
    SCHEMA_VERSION,
    RepeatSetSummary,
    SloLimit,
    StepSummary,
    Summary,
    load_summary,
)
from capacity_plugins.errors import UserError

DATA = ROOT / "tests" / "data_results"
SUMMARIES = sorted(p.parent.name for p in DATA.glob("*/summary.json"))
METAS = sorted(p.parent.name for p in DATA.glob("*/meta.json"))


def same(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two parsed JSON documents differ, JSON types included (1 is not 1.0 here)."""
    if type(a) is not type(b):
        return [f"{where}: {a!r} vs {b!r}"]
    if isinstance(a, dict):
        out = [f"{where}.{k}: only in one" for k in a.keys() ^ b.keys()]
        return out + [d for k in a.keys() & b.keys() for d in same(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in same(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def extras(model: Any, where: str = "") -> list[str]:
    """The keys of a model tree that no field declares (read back as pydantic extras)."""
    if isinstance(model, Section):
        out = [f"{where}.{k}" for k in (model.model_extra or {})]
        for name in type(model).model_fields:
            out += extras(getattr(model, name), f"{where}.{name}")
        return out
    if isinstance(model, list):
        return [e for i, x in enumerate(model) for e in extras(x, f"{where}[{i}]")]
    if isinstance(model, dict):
        return [e for k, x in model.items() for e in extras(x, f"{where}.{k}")]
    return []


# Verdict settings added since those files were written: a file read back gains each with its
# default, the value every analysis before it used in effect (it had no such threshold).
ADDED_SETTINGS = {"deferred_min": 1.0}


@pytest.mark.parametrize("name", SUMMARIES)
def test_a_summary_written_before_the_models_loads_and_is_written_back_unchanged(name):
    f = DATA / name / "summary.json"
    s = load_summary(f)
    assert isinstance(s, RepeatSetSummary if name == "repeat_set" else Summary)
    assert s.schema_version == SCHEMA_VERSION
    back = json.loads(s.dumps())
    assert {k: back["verdict_settings"].pop(k) for k in ADDED_SETTINGS} == ADDED_SETTINGS
    assert same(json.loads(f.read_text()), back) == []
    assert extras(s) == []  # every key it holds is a field of a model


@pytest.mark.parametrize("name", [n for n in SUMMARIES if n != "repeat_set"])
def test_the_readers_read_a_loaded_summary_as_the_analysis_built_it(name):
    s = load_summary(DATA / name / "summary.json")
    assert isinstance(s, Summary)
    assert plain_answer(s) == s.answer  # the answer, worded again from the loaded numbers
    assert [r.step for r in s.steps] == list(range(len(s.steps)))
    assert all(v.judgement in ("pass", "fail", "uncertain") for r in s.steps for v in r.slo.values())


def test_the_sections_each_run_kind_adds_are_read_back():
    assert load_summary(DATA / "trace" / "summary.json").trace.first_broken_window == 2  # type: ignore[union-attr]
    search = load_summary(DATA / "search" / "summary.json").search  # type: ignore[union-attr]
    assert search is not None and search.steps[0].judgement == "invalid"
    workloads = load_summary(DATA / "workloads" / "summary.json")
    assert isinstance(workloads, Summary) and workloads.workloads is not None
    assert workloads.workloads.limiting == workloads.capacity.limiting_workload == "rag"
    assert all(r.workloads for r in workloads.steps)
    probe = load_summary(DATA / "cache_probe" / "summary.json")
    assert isinstance(probe, Summary) and probe.cache_probe is not None
    assert probe.cache_probe.levels[0].deltas["ttft_p95_ms"].judgement == "cache_flatters"
    lost = load_summary(DATA / "repeat_set" / "summary.json")
    assert isinstance(lost, RepeatSetSummary) and lost.capacity.method == "repeats" and lost.run.repeats


@pytest.mark.parametrize("name", METAS)
def test_a_meta_json_written_before_the_models_loads_and_is_written_back_unchanged(name, tmp_path):
    f = DATA / name / "meta.json"
    meta = Meta.load(f)
    assert extras(meta) == []
    meta.write(tmp_path / "meta.json")
    back = json.loads((tmp_path / "meta.json").read_text())
    assert back.pop("schema_version") == META_SCHEMA_VERSION  # the one key the version adds
    assert same(json.loads(f.read_text()), back) == []
    assert list(back) == sorted(back)  # keys sorted, as before


def test_a_fresh_analysis_builds_only_declared_keys_and_leaves_sometimes_keys_out(tmp_path):
    closed = summarise(load_run(make_results(tmp_path / "closed", levels=[1, 2, 4], rps=[5, 10, 20],
                                             gpu_util=[30, 60, 90], capacity={"peak_qps": 30})))
    opened = summarise(load_run(make_results(tmp_path / "open", kind="rate", levels=[5, 10, 20], rps=[5, 10, 20])))
    for s in (closed, opened):
        assert extras(s) == []
    doc = json.loads(closed.dumps())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["search"] is None and doc["workloads"] is None
    row = doc["steps"][0]
    assert "ttft_from_schedule_p95_ms" not in row and "workloads" not in row
    assert "limiting_workload" not in doc["capacity"] and "sd" not in doc["capacity"]
    assert all(v["pass"] in (True, False) for v in row["slo"].values()) and row["slo"]  # `pass` on disk
    assert "ttft_from_schedule_p95_ms" in json.loads(opened.dumps())["steps"][0]


def test_an_unbounded_end_is_inf_in_memory_and_null_on_disk(tmp_path):
    # 18 requests per step: their P99 has no upper bound
    s = summarise(load_run(make_results(tmp_path, levels=[1, 2], rps=[1.8, 1.8], window_s=10)))
    assert s.steps[0].e2e_p99_ci_ms is not None and s.steps[0].e2e_p99_ci_ms[1] is None
    # a quantile over the limit's misses (a missing value counts as over) is infinite: strict JSON says null
    s.steps[0].slo["e2e_ms"] = limit = SloLimit(limit_ms=2000.0, quantile_ms=math.inf, quantile_ci_ms=[900.0, math.inf])
    assert limit.to_json()["quantile_ci_ms"] == [900.0, math.inf]  # in memory, for the code that compares
    text = s.dumps()
    assert "Infinity" not in text and "NaN" not in text
    back = json.loads(text)["steps"][0]["slo"]["e2e_ms"]
    assert back["quantile_ms"] is None and back["quantile_ci_ms"] == [900.0, None]
    assert dumps_json({"x": math.nan, "y": [math.inf, 1.0]}) == json.dumps({"x": None, "y": [None, 1.0]}, indent=2)


def test_a_bad_summary_is_one_line_naming_the_key(tmp_path):
    doc = json.loads((DATA / "quickstart" / "summary.json").read_text())
    doc["steps"][1]["requests"] = "many"
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"summary.json: steps\.1\.requests: "):
        load_summary(f)
    f.write_text(json.dumps({"answer": "x"}))
    with pytest.raises(UserError, match="not a capacity summary"):
        load_summary(tmp_path)


def test_a_step_row_copy_keeps_its_keys():
    # the capacity's interval ends view a row through a copy with other numbers: the keys it writes stay the row's
    row = StepSummary(step=0, level=2.0, rps=4.0, conclusion="baseline")
    view = row.model_copy(update={"rps": 3.5})
    assert view.to_json().keys() == row.to_json().keys() and view.rps == 3.5 and row.rps == 4.0


def test_the_schema_doc_is_what_the_models_generate():
    doc = Path(schema_doc.DOC)
    assert doc == ROOT / "docs" / "results-schema.md"
    assert doc.read_text(encoding="utf-8") == schema_doc.generate(), (
        "docs/results-schema.md is out of date: run python -m capacity_plugins.contracts.schema_doc")
    assert schema_doc.main(["--check"]) == 0


def test_the_report_columns_name_fields_of_the_models():
    # the load table, the plots and the trace table pick their columns by field name: a typo there
    # would be an attribute error only when that column is drawn, so every one is checked here
    from capacity_plugins.contracts.planning import SLOConfig
    from capacity_plugins.contracts.summary import TraceWindow
    from capacity_plugins.outputs import report, report_text, trace_text

    row = set(StepSummary.model_fields)
    cols = [(k, ci) for k, _, _, ci in report_text.TABLE_COLS] + [(k, ci) for k, _, ci in report_text.SHORT_COLS]
    assert {k for k, _ in cols} | {ci for _, ci in cols if ci} | set(report_text.TTFT_COLS) <= row
    assert {k for k, _, _ in report.LATENCY_LINES} <= row & set(SLOConfig.model_fields)
    assert {k for _, k in trace_text.TRACE_COLS} - {"window", "span", "slo"} <= set(TraceWindow.model_fields)
