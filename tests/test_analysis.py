"""Loader, per-step table and capacity under the SLO on synthetic results folders."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.analysis_data import make_results

from capacity_plugins import analyze
from capacity_plugins.analysis import records
from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.errors import UserError


def test_capacity_interpolated_between_last_pass_and_first_fail(tmp_path):
    # every request of a step has the same latency, so P95 is exact: 1000 ms at 10 rps, 3000 at 20
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=[800, 1000, 3000],
                     e2e_p99_ms=[800, 1000, 3000], slo={"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000})
    cap = summarise(load_run(p)).capacity
    assert cap.method == "interpolated"
    assert cap.per_node_rps == pytest.approx(15.0, rel=1e-6)  # halfway in latency → halfway in rps
    assert cap.per_node_concurrency == pytest.approx(3.0, rel=1e-6)
    assert (cap.last_pass_level, cap.first_fail_level, cap.limiting_slo) == (2, 4, "e2e_ms")
    assert any("wide" in n for n in cap.notes)  # 2 → 4 is a 100 % bracket: refine


def test_replicas_behind_url_divide_capacity(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=[800, 1000, 3000],
                     e2e_p99_ms=[800, 1000, 3000], capacity={"replicas_behind_url": 2})
    assert summarise(load_run(p)).capacity.per_node_rps == pytest.approx(7.5, rel=1e-6)


def test_client_limited_steps_never_set_capacity_or_knee(tmp_path):
    # level 8 is client-limited and looks terrible; without it the SLO never failed
    p = make_results(tmp_path, levels=[1, 2, 4, 8], rps=[5, 10, 20, 12], e2e_p50_ms=[500, 500, 600, 9000],
                     e2e_p99_ms=[600, 600, 700, 12000], client_limited=[False, False, False, True])
    s = summarise(load_run(p))
    cap = s.capacity
    assert cap.method == "never_failed" and cap.per_node_rps == pytest.approx(20)
    assert cap.excluded_steps == [3]
    assert s.knee.value is None and s.knee.excluded_levels == [8]
    assert s.steps[3].valid is False and "invalid" in s.steps[3].conclusion


def test_error_rate_fails_a_step_and_open_loop_judged_from_schedule(tmp_path):
    p = make_results(tmp_path, kind="rate", levels=[5, 10, 20], rps=[5, 10, 20], error_rate=[0, 0, 0.2],
                     e2e_p50_ms=500, e2e_p99_ms=600)
    s = summarise(load_run(p))
    assert [r.slo_pass for r in s.steps] == [True, True, False]
    assert s.capacity.limiting_slo == "error_rate"
    assert s.steps[2].error_kinds == {"http_5xx": round(20 * 60 * 0.2)}  # 20 rps × 60 s window × 20 %
    # make the scheduled view worse than the send view: the SLO must follow the schedule
    lines = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    for r in lines:
        if r["ok"] and r["step"] == 1:
            r["e2e_from_schedule_ms"] = 5000.0
    (p / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    s = summarise(load_run(p))
    assert s.steps[1].slo_pass is False and s.steps[1].e2e_p95_ms < 1000


def test_percentiles_exact_and_warmup_excluded(tmp_path):
    p = make_results(tmp_path, levels=[1, 2], rps=[20, 40], e2e_p50_ms=[100, 200], e2e_p99_ms=[400, 800])
    run = load_run(p)
    req = run.requests
    m = req[(req["step"] == 1) & ~req["warmup"] & req["ok"]]
    row = summarise(run).steps[1]
    assert row.requests == 40 * 60  # 40 rps × the 60 s window: warm-up records are tagged and left out
    # nearest rank, the definition the live sketches use too
    assert row.e2e_p95_ms == pytest.approx(np.sort(m["e2e_ms"])[math.ceil(0.95 * len(m)) - 1])
    assert row.achieved_rps == pytest.approx(40) and row.rps == pytest.approx(40)
    assert row.itl_p50_ms == pytest.approx(np.percentile(m["e2e_ms"] * 0.75 / 63, 50), rel=2e-3)


@pytest.mark.parametrize("itl", ["inline", "jsonl"])
def test_orjson_and_arrow_readers_and_itl_side_file_agree(tmp_path, monkeypatch, itl):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[3, 6, 9], e2e_p50_ms=[100, 150, 400], e2e_p99_ms=[200, 300, 900], itl=itl)
    ref = summarise(load_run(p)).steps
    monkeypatch.setattr(records, "_arrow_available", lambda: False)
    other = summarise(load_run(p)).steps
    for a, b in zip(ref, other, strict=True):
        for k in ("requests", "e2e_p95_ms", "ttft_p99_ms", "itl_p95_ms", "tpot_p50_ms", "rps"):
            assert getattr(a, k) == pytest.approx(getattr(b, k)), k
    assert ref[2].itl_p95_ms is not None


def test_itl_parquet_side_file_matches_inline(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = make_results(tmp_path, levels=[1, 2], rps=[3, 6], e2e_p50_ms=[100, 400], e2e_p99_ms=[200, 900], itl_gaps=5)
    ref = summarise(load_run(p)).steps
    lines = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    # written in another order than requests.jsonl: the reader must join on request_id
    side = sorted(({"request_id": r["request_id"], "itl_ms": r.pop("itl_ms")} for r in lines), key=lambda d: d["request_id"])
    (p / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    pq.write_table(pa.Table.from_pylist(side), p / "itl.parquet")
    got = summarise(load_run(p)).steps
    assert [r.itl_p95_ms for r in got] == pytest.approx([r.itl_p95_ms for r in ref])


def test_corrupt_itl_side_file_names_the_line(tmp_path):
    p = make_results(tmp_path, levels=[1, 2], rps=[3, 6], itl="jsonl")
    lines = (p / "itl.jsonl").read_text().splitlines()
    lines[1] = '{"request_id": "r1", "itl_ms": [1, "x"]}'
    (p / "itl.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="itl.jsonl line 2"):
        load_run(p)


def test_robust_to_real_data_oddities(tmp_path):
    """Steps with zero requests, all failures, null ttft, no telemetry/meta/scenario: still a summary."""
    p = make_results(tmp_path, levels=[1, 2, 4, 8], rps=[5, 10, 0, 10], error_rate=[0, 0, 0, 1.0],
                     meta={}, scenario=False)
    (p / "meta.json").unlink()
    lines = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    for r in lines[:3]:
        r["ttft_ms"] = None  # a stream that never produced a token
        r["tpot_ms"] = None
    lines.append({"request_id": "x", "step": None, "warmup": False, "ok": False, "error_kind": "cancelled"})
    (p / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    msgs: list[str] = []
    s = analyze(p, progress=msgs.append)
    assert any("request records" in m for m in msgs) and any("analysis done" in m for m in msgs)
    rows = s.steps
    assert rows[2].requests == 0 and rows[2].conclusion == "no measured requests" and not rows[2].valid
    assert rows[3].ok_requests == 0 and rows[3].conclusion == "all requests failed"
    assert rows[0].ttft_p95_ms is not None
    assert s.verdict.decision == "observe"
    assert any("telemetry" in w for w in s.warnings) and any("meta.json" in w for w in s.warnings)
    for f in ("summary.json", "summary.md", "report.html", "throughput_latency.png"):
        assert (p / f).stat().st_size > 0
    json.loads((p / "summary.json").read_text())  # NaN never leaks into the JSON


def test_empty_requests_file_is_data_not_a_crash(tmp_path):
    p = make_results(tmp_path, levels=[1, 2], rps=[0, 0])
    s = analyze(p)
    assert all(r.requests == 0 for r in s.steps) and s.capacity.method == "no_valid_steps"


def test_overrides_win_over_scenario(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20], e2e_p50_ms=[800, 1000, 3000],
                     e2e_p99_ms=[800, 1000, 3000], slo={"e2e_p95_ms": 2000, "ttft_p95_ms": None, "tpot_p95_ms": None})
    s = summarise(load_run(p, overrides={"e2e_p95_ms": 5000}))
    assert s.capacity.method == "never_failed" and s.slo.e2e_p95_ms == 5000


def test_no_slo_uses_utilisation_cap_only_then(tmp_path):
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20],
                     slo={"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": None})
    cap = summarise(load_run(p)).capacity
    assert cap.method == "utilisation_cap" and cap.per_node_rps == pytest.approx(14.0)


def test_soak_stability_flags_vram_growth_and_latency_drift(tmp_path):
    from capacity_plugins.analysis.stability import stability

    p = make_results(tmp_path, kind="peak", levels=[10], rps=[2], window_s=3600, e2e_p50_ms=500, e2e_p99_ms=600,
                     gpu_util=[60])
    run = load_run(p)
    req = run.requests.copy()
    late = req["sent_unix"] > req["sent_unix"].quantile(0.7)
    req.loc[late, "ttft_ms"] *= 2
    t = run.telemetry.copy()
    vram = t["series"] == "vram_used_bytes"
    t.loc[vram, "value"] = 40e9 + (t.loc[vram, "unix"] - t.loc[vram, "unix"].min()) * 1e6  # +3.6 GB/h
    st = stability(req, t, "soak")
    assert st.soak is True
    assert any("VRAM grows" in f for f in st.findings) and any("TTFT P95 drifted" in f for f in st.findings)
    assert st.trends["vram_used_bytes_per_h"] == pytest.approx(3.6e9, rel=0.01)


@pytest.mark.parametrize("flag", [{"complete": False, "incomplete_reason": "interrupted (Ctrl-C / SIGTERM)"},
                                  {"incomplete": True}])
def test_interrupted_run_and_lost_records_are_reported(tmp_path, flag):
    # `complete: false` is what the load side writes (rehearsal / runner); `incomplete` older folders
    p = make_results(tmp_path, levels=[1, 2, 4], rps=[5, 10, 20],
                     meta={"model": "m", **flag, "records": {"written": 10, "produced": 15, "lost": 5}})
    s = summarise(load_run(p))
    assert any("incomplete (interrupted" in w for w in s.warnings), s.warnings
    assert any("5 request records were lost" in w for w in s.warnings)
    assert s.meta.incomplete is True
    assert {i.id: i.status for i in s.checklist}["pre.3_batch_runs"] == "fail"
    assert s.meta.records.lost == 5


def test_capacity_is_the_best_passing_step_when_throughput_dips(tmp_path):
    # seen on a real simulator sweep: 4 users 20 rps, 8 users 17.3 rps, SLO held throughout
    p = make_results(tmp_path, levels=[1, 2, 4, 8], rps=[7, 10.7, 20, 17.3], e2e_p50_ms=[120, 160, 200, 440],
                     e2e_p99_ms=[290, 390, 300, 640])
    cap = summarise(load_run(p)).capacity
    assert cap.method == "never_failed"
    assert cap.per_node_rps == pytest.approx(20) and cap.per_node_concurrency == 4


def test_sweep_latency_growth_is_not_reported_as_drift(tmp_path):
    # A sweep's latency rises because the load rises; calling that "drift" would be wrong.
    from capacity_plugins.analysis.stability import stability

    p = make_results(tmp_path, levels=[1, 2, 4, 8], rps=[2, 4, 8, 8], window_s=60,
                     e2e_p50_ms=500, e2e_p99_ms=600, gpu_util=[20, 40, 80, 95])
    run = load_run(p)
    req = run.requests.copy()
    req["ttft_ms"] = req["ttft_ms"] * (1 + req["step"].astype(float) * 3)  # later steps: much slower
    st = stability(req, run.telemetry, "concurrency_sweep")
    assert not any("drifted" in f for f in st.findings), st.findings
    assert any("constant load" in f for f in st.findings)
