"""The analysis reads the records step by step (analysis/step_records.py) and gives the summary the
whole-run frame gave.

The expected summaries in data_results/stepwise/ were written by the analysis as it was before it
read step by step (commit fd25f8e, every record's columns in one frame), from the folders built
here: a rate sweep with failures, cancellations, warm-up, telemetry and an ITL limit, whose records
of consecutive steps interleave and 25 of which have no step (`mixed_records`), and a one-hour
one-step soak whose latency drifts (its stability reads the records whole). Each is analysed from
requests.arrow up to a gap with the JSONL's lines after it (the tail), and from requests.jsonl
alone; both must give the stored summary key for key, and the report's box-plot samples must be
the ones the report drew from the whole frame. Two changes since: the soak's telemetry is constant,
and its trends are 0.0 where the old fit on raw Unix times gave rounding noise (stability.py); and
`verdict_settings` holds `deferred_min` (1.0), a threshold added later, which these runs never reach.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.analysis_data import make_results, mixed_records, with_typed_copy
from helpers.paths import TESTS

from capacity_plugins.analysis.distributions import BOX_SAMPLE, of_run
from capacity_plugins.analysis.load import load_run
from capacity_plugins.analysis.pipeline import summarise
from capacity_plugins.analysis.step_records import ArrowRecords, FrameRecords
from capacity_plugins.contracts.folders import COLUMNAR_FILE

pytestmark = pytest.mark.cpu

EXPECTED = TESTS / "data_results" / "stepwise"


def sweep(path: Path) -> Path:
    return mixed_records(make_results(
        path, kind="rate", levels=[2, 4, 8, 16], rps=[2, 4, 7.5, 8], window_s=120, e2e_p50_ms=[300, 350, 600, 1500],
        e2e_p99_ms=[500, 700, 1400, 4000], error_rate=[0, 0.02, 0.05, 0.2], itl_gaps=6, gpu_util=[20, 40, 80, 97],
        waiting=[0, 0.2, 2, 9], slo={"ttft_p95_ms": 400.0, "e2e_p95_ms": 1500.0, "itl_p95_ms": 20.0}))


def soak(path: Path) -> Path:
    folder = make_results(path, kind="peak", levels=[10], rps=[3], window_s=3600, e2e_p50_ms=500, e2e_p99_ms=900,
                          error_rate=[0.01], itl_gaps=4, gpu_util=[60])
    recs = [orjson.loads(ln) for ln in (folder / "requests.jsonl").read_bytes().splitlines()]
    late = sorted(r["sent_unix"] for r in recs)[int(len(recs) * 0.7)]
    for r in recs:  # the last third slower: drift the stability must find
        if r["ttft_ms"] is not None and r["sent_unix"] > late:
            r["ttft_ms"] *= 2
    (folder / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return folder


FOLDERS = {"sweep": sweep, "soak": soak}


def summary_of(folder: Path) -> dict:
    doc = json.loads(summarise(load_run(folder)).dumps())
    doc["meta"].pop("results_dir")  # where this test's tmp_path was
    return doc


@pytest.fixture(scope="module", params=sorted(FOLDERS))
def folder(request, tmp_path_factory) -> tuple[str, Path]:
    name = request.param
    return name, FOLDERS[name](tmp_path_factory.mktemp(name) / "run")


def test_the_summary_is_the_one_the_whole_frame_gave(folder):
    name, path = folder
    want = json.loads((EXPECTED / f"{name}.json").read_text())
    with_typed_copy(path, skip={7})  # a gap after 350 records: the JSONL's lines after it are the tail
    run = load_run(path)
    assert isinstance(run.records, ArrowRecords) and run.records.count > 400
    assert summary_of(path) == want
    (path / COLUMNAR_FILE).unlink()
    run = load_run(path)
    assert isinstance(run.records, FrameRecords)
    assert summary_of(path) == want
    if name == "sweep":  # what the folder is meant to exercise is there
        assert any(s["cancelled"] for s in want["steps"]) and want["steps"][0]["ttft_from_schedule_p95_ms"]
    else:
        assert any("drifted" in f for f in want["stability"]["findings"])


def test_the_report_samples_are_the_ones_drawn_from_the_whole_frame(folder):
    _name, path = folder
    run = load_run(path)
    summarise(run)
    req = run.requests
    m = req.loc[req["ok"] & ~req["warmup"] & (req["step"] >= 0), ["step", "ttft_ms", "e2e_ms"]]
    for st in run.steps:
        for col in ("ttft_ms", "e2e_ms"):
            v = m.loc[m["step"] == st.index, col].dropna().to_numpy()
            if v.size > BOX_SAMPLE:
                v = np.random.default_rng(0).choice(v, BOX_SAMPLE, replace=False)
            assert np.array_equal(of_run(run)[st.index][col], v)
    fresh = load_run(path)  # a run the analysis did not walk: the report walks it itself
    assert {i: {c: a.tolist() for c, a in d.items()} for i, d in of_run(fresh).items()} == \
        {i: {c: a.tolist() for c, a in d.items()} for i, d in of_run(run).items()}


def test_each_step_is_handed_on_whole_and_once(folder):
    """Every step value's records, once, in the file's order within the step: from the typed copy
    with its tail as from the whole frame."""
    _name, path = folder
    whole = load_run(path).requests.drop(columns=["request_id"])  # requests.jsonl parsed whole
    with_typed_copy(path, skip={7})
    for records in (load_run(path).records, FrameRecords(whole)):
        streamed = [(k, f.reset_index(drop=True)) for k, f in records.steps()]
        assert len({k for k, _f in streamed}) == len(streamed) and sum(len(f) for _k, f in streamed) == len(whole)
        for k, f in streamed:
            assert f.equals(whole[whole["step"] == k].reset_index(drop=True)), k
    (path / COLUMNAR_FILE).unlink()
