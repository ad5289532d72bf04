"""Where TTFT goes: the arithmetic of the per-step breakdown on synthetic scrapes.

Cumulative histograms (`_sum`, `_count`) are built from known observations per scrape interval
and go through the real normalisation (telemetry/maps.py `normalize` + `SeriesTracker`) into
telemetry_series rows, so every expected mean below is computed from the observations that
landed between the scrapes a window must use — never typed in.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers.analysis_data import make_results

from capacity_plugins import analyze
from capacity_plugins.analysis.ttft_breakdown import (
    ServerHistograms,
    TTFTBreakdown,
    breakdown_notes,
    ttft_reasons,
)
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.planning import VerdictConfig
from capacity_plugins.contracts.steps import StepRow
from capacity_plugins.contracts.summary import StepSummary
from capacity_plugins.telemetry.maps import Sample, SeriesTracker, normalize
from capacity_plugins.telemetry.scrape import parse_exposition

FAMILIES = {"server_queue_s": "vllm:request_queue_time_seconds", "server_prefill_s": "vllm:request_prefill_time_seconds",
            "server_ttft_s": "vllm:time_to_first_token_seconds"}
T0 = 1_800_000_000.0
SCRAPES = [T0 + i for i in range(11)]  # one scrape a second; interval i is (SCRAPES[i-1], SCRAPES[i]]


def observations(seed: int = 1) -> dict[str, list[np.ndarray]]:
    """Per series, the observations completing in each scrape interval (interval 0: before the first scrape)."""
    rng = np.random.default_rng(seed)
    scale = {"server_queue_s": 0.4, "server_prefill_s": 0.04, "server_ttft_s": 0.45}
    return {s: [rng.exponential(scale[s], size=int(rng.integers(2, 9))) for _ in SCRAPES] for s in FAMILIES}


def series_rows(obs: dict[str, list[np.ndarray]], *, host: str = "gpu-node:8000", skip: tuple[int, ...] = (),
                restart_at: int | None = None, families: dict[str, str] = FAMILIES) -> list[dict]:
    """telemetry_series rows of one target scraped at SCRAPES (minus `skip`: failed scrapes). With
    `restart_at`, the server restarted inside that interval: its counters start again from the
    observations after the restart (here: all of that interval's)."""
    tracker, rows = SeriesTracker(), []
    for i, t in enumerate(SCRAPES):
        first = 0 if restart_at is None or i < restart_at else restart_at
        samples = [Sample("vllm:num_requests_running", {"model_name": "m"}, 4.0)]
        for series, family in families.items():
            seen = np.concatenate(obs[series][first:i + 1])
            samples += [Sample(f"{family}_sum", {"model_name": "m"}, float(seen.sum())),
                        Sample(f"{family}_count", {"model_name": "m"}, float(seen.size))]
        if i in skip:
            continue
        rows += tracker.rows(normalize("vllm", samples, host), t)
    return rows


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def expected(obs: dict[str, list[np.ndarray]], series: str, intervals) -> float:
    return float(np.concatenate([obs[series][i] for i in intervals]).mean())


@pytest.mark.parametrize("begin,end", [(T0 + 2.5, T0 + 7.5), (T0 + 3.0, T0 + 7.0), (T0 + 2.0001, T0 + 7.9999)])
def test_window_mean_runs_between_the_first_and_last_scrape_inside_the_window(begin, end):
    obs = observations()
    hist = ServerHistograms(frame(series_rows(obs)))
    for series in FAMILIES:
        got = hist.window_mean(series, begin, end)
        assert got is not None
        # scrapes 3..7 lie inside: the intervals ending at 4, 5, 6, 7 — never one straddling an edge
        assert got.mean_s == pytest.approx(expected(obs, series, range(4, 8)), rel=1e-12)
        assert got.edges == (SCRAPES[3], SCRAPES[7])
        assert got.count == sum(obs[series][i].size for i in range(4, 8))


def test_a_failed_scrape_inside_the_window_loses_nothing():
    obs = observations(2)
    hist = ServerHistograms(frame(series_rows(obs, skip=(5,))))
    got = hist.window_mean("server_ttft_s", T0 + 2.5, T0 + 7.5)
    assert got is not None  # the interval after the gap spans both seconds
    assert got.mean_s == pytest.approx(expected(obs, "server_ttft_s", range(4, 8)), rel=1e-12)


def test_a_failed_scrape_at_the_window_edge_moves_the_edge_inside():
    obs = observations(3)
    hist = ServerHistograms(frame(series_rows(obs, skip=(3,))))
    got = hist.window_mean("server_queue_s", T0 + 2.5, T0 + 7.5)
    assert got is not None and got.edges == (SCRAPES[4], SCRAPES[7])  # the nearest scrape inside
    assert got.mean_s == pytest.approx(expected(obs, "server_queue_s", range(5, 8)), rel=1e-12)


def test_a_counter_reset_drops_only_its_own_interval():
    obs = observations(4)
    hist = ServerHistograms(frame(series_rows(obs, restart_at=5)))
    for series in FAMILIES:
        got = hist.window_mean(series, T0 + 2.5, T0 + 7.5)
        assert got is not None
        # the restart interval's counters went backwards: no row; the others are whole
        assert got.mean_s == pytest.approx(expected(obs, series, (4, 6, 7)), rel=1e-12)


def test_replicas_are_pooled_by_their_observations():
    a, b = observations(5), observations(6)
    rows = series_rows(a, host="node-a:8000") + series_rows(b, host="node-b:8000")
    got = ServerHistograms(frame(rows)).window_mean("server_prefill_s", T0 + 2.5, T0 + 7.5)
    pooled = np.concatenate([x["server_prefill_s"][i] for x in (a, b) for i in range(4, 8)])
    assert got is not None and got.mean_s == pytest.approx(float(pooled.mean()), rel=1e-12)


def test_a_window_with_fewer_than_two_scrapes_or_no_observation_has_no_mean():
    obs = observations(7)
    hist = ServerHistograms(frame(series_rows(obs)))
    assert hist.window_mean("server_ttft_s", T0 + 3.2, T0 + 3.9) is None   # no scrape inside
    assert hist.window_mean("server_ttft_s", T0 + 2.5, T0 + 3.5) is None   # one scrape: no interval
    assert hist.window_mean("server_ttft_s", T0 + 20, T0 + 30) is None     # after the run
    assert ServerHistograms(None).window_mean("server_ttft_s", T0, T0 + 10) is None


def _requests(first_token_unix: list[float], ttft_ms: list[float], warmup: list[bool]) -> pd.DataFrame:
    sent = [f - t / 1000 for f, t in zip(first_token_unix, ttft_ms, strict=True)]
    return pd.DataFrame({"step": [0] * len(sent), "sent_unix": sent, "ttft_ms": ttft_ms, "ok": True,
                         "warmup": warmup})


STEP = StepRow(index=0, kind="concurrency", level=8, start_unix=T0, warmup_end_unix=T0 + 2.5, end_unix=T0 + 7.5)


def test_step_row_compares_the_client_with_the_server_over_the_same_requests():
    obs = observations(8)
    # the client saw each server TTFT 0.6 ms later; one request sent in the warm-up whose first token
    # came inside counts (the server's histogram counted it), one whose first token came before the
    # first in-window scrape does not, though it was measured
    firsts = [T0 + 3.5, T0 + 4.2, T0 + 6.9, T0 + 2.9, T0 + 3.4]
    ttft = [300.0, 420.0, 380.0, 500.0, 3400.0]
    req = _requests(firsts, ttft, warmup=[False, False, False, False, True])
    row = TTFTBreakdown(req, frame(series_rows(obs))).row(STEP)
    queue, ttft_srv = (expected(obs, s, range(4, 8)) * 1000 for s in ("server_queue_s", "server_ttft_s"))
    assert row["server_queue_mean_ms"] == pytest.approx(queue)
    assert row["server_prefill_mean_ms"] == pytest.approx(expected(obs, "server_prefill_s", range(4, 8)) * 1000)
    assert row["server_ttft_mean_ms"] == pytest.approx(ttft_srv)
    assert row["ttft_window_unix"] == [SCRAPES[3], SCRAPES[7]]
    inside = [t for f, t in zip(firsts, ttft, strict=True) if SCRAPES[3] < f <= SCRAPES[7]]
    assert row["client_ttft_mean_ms"] == pytest.approx(np.mean(inside))
    assert row["client_remainder_ms"] == pytest.approx(np.mean(inside) - ttft_srv)
    assert row["ttft_queue_share"] == pytest.approx(queue / ttft_srv)
    assert row["ttft_queue_share_basis"] == "server_ttft"


def test_without_a_server_ttft_the_share_is_of_the_client_ttft_and_there_is_no_remainder():
    obs = observations(9)
    no_ttft = {k: v for k, v in FAMILIES.items() if k != "server_ttft_s"}
    firsts, ttft = [T0 + 1.0, T0 + 3.5, T0 + 6.0, T0 + 7.4], [900.0, 400.0, 600.0, 500.0]
    req = _requests(firsts, ttft, warmup=[True, False, False, False])
    row = TTFTBreakdown(req, frame(series_rows(obs, families=no_ttft))).row(STEP)
    client = np.mean(ttft[1:])  # the measured requests (warm-up excluded), as the TTFT columns count them
    assert row["server_ttft_mean_ms"] is None and row["client_remainder_ms"] is None
    assert row["client_ttft_mean_ms"] == pytest.approx(client)
    assert row["ttft_queue_share"] == pytest.approx(row["server_queue_mean_ms"] / client)
    assert row["ttft_queue_share_basis"] == "client_ttft"


def test_missing_series_are_said_once_with_the_server_kind():
    meta = Meta.model_validate({"telemetry": {"provenance": {"targets": {
        "http://h:8002/metrics": {"kind": "triton"}, "http://h:9400/metrics": {"kind": "dcgm"}}}}})
    series = {"server_queue_s", "server_queue_s_count", "server_ttft_s", "server_ttft_s_count", "gpu_util_pct"}
    notes = breakdown_notes(series, meta)
    assert notes.server_parts == {"server_queue_s": True, "server_prefill_s": False, "server_ttft_s": True}
    assert notes.server_kinds == ["triton"]
    assert len(notes.notes) == 1 and "server_prefill_s" in notes.notes[0] and "triton" in notes.notes[0]
    none = breakdown_notes({"gpu_util_pct"}, Meta())
    assert len(none.notes) == 1 and "only the client TTFT mean is known" in none.notes[0]


def test_reasons_name_their_threshold_and_level():
    vc = VerdictConfig()
    loaded = StepSummary(level=16, valid=True, ttft_queue_share=0.8, ttft_queue_share_basis="server_ttft",
                         server_queue_mean_ms=800.0, server_ttft_mean_ms=1000.0, client_ttft_mean_ms=1000.5,
                         client_remainder_ms=0.5)
    low = loaded.model_copy(update={"level": 2, "ttft_queue_share": 0.1,
                                    "client_remainder_ms": 2 * vc.client_remainder_max_ms, "client_ttft_mean_ms": 60.0,
                                    "server_ttft_mean_ms": 60.0 - 2 * vc.client_remainder_max_ms})
    used: dict[str, float] = {}
    reasons = ttft_reasons([low, loaded], loaded, vc, used.__setitem__)
    assert reasons[0].startswith(f"TTFT is {loaded.ttft_queue_share * 100:.0f} % queue at 16 users")
    assert "add replicas or batch slots, not faster GPUs" in reasons[0]
    assert f"adds {2 * vc.client_remainder_max_ms:.1f} ms" in reasons[1] and "at 2 users" in reasons[1]
    assert "check the network / client" in reasons[1]
    # the thresholds that decided them are handed back apart, never inside the sentences
    assert used == {"verdict.queue_dominant_share": vc.queue_dominant_share,
                    "verdict.client_remainder_max_ms": vc.client_remainder_max_ms}
    assert not any("verdict." in r for r in reasons)
    # at the thresholds' other side: nothing to say
    calm = VerdictConfig(queue_dominant_share=0.81, client_remainder_max_ms=3 * vc.client_remainder_max_ms)
    assert ttft_reasons([low, loaded], loaded, calm) == []


def test_sglang_prefill_stage_and_triton_queue_weight_reach_the_series():
    def two_scrapes(kind: str, text) -> dict:
        tracker, rows = SeriesTracker(), []
        for k in (1, 3):
            rows = tracker.rows(normalize(kind, parse_exposition(text(k)), "h:1"), float(k))
        return {r["series"]: r["value"] for r in rows}

    def sglang(k: int) -> str:
        lab = 'model_name="q"'
        return "\n".join([
            "# TYPE sglang:per_stage_req_latency_seconds histogram",
            f'sglang:per_stage_req_latency_seconds_count{{{lab},stage="prefill_forward"}} {4 * k}',
            f'sglang:per_stage_req_latency_seconds_sum{{{lab},stage="prefill_forward"}} {0.03 * 4 * k}',
            f'sglang:per_stage_req_latency_seconds_count{{{lab},stage="decode_forward"}} {400 * k}',
            f'sglang:per_stage_req_latency_seconds_sum{{{lab},stage="decode_forward"}} {0.01 * 400 * k}']) + "\n"

    got = two_scrapes("sglang", sglang)
    assert got["server_prefill_s"] == pytest.approx(0.03) and got["server_prefill_s_count"] == 8  # decode left out

    def triton(k: int) -> str:
        m = 'model="ensemble",version="1"'
        return "\n".join([
            "# TYPE nv_inference_request_success counter", f"nv_inference_request_success{{{m}}} {10 * k}",
            "# TYPE nv_inference_request_failure counter", f"nv_inference_request_failure{{{m}}} 0",
            "# TYPE nv_inference_queue_duration_us counter", f"nv_inference_queue_duration_us{{{m}}} {2500 * 10 * k}",
        ]) + "\n"

    got = two_scrapes("triton", triton)
    assert got["server_queue_s"] == pytest.approx(0.0025) and got["server_queue_s_count"] == 20


def test_a_results_folder_gets_the_columns_the_notes_and_the_bars(tmp_path):
    obs = observations(10)
    folder = make_results(tmp_path / "run", levels=[1, 2, 4], rps=[2, 2, 2], window_s=4.0, e2e_p50_ms=2000,
                          e2e_p99_ms=2500, ttft_share=0.5, slo={"ttft_p95_ms": 5000, "tpot_p95_ms": None},
                          load={"min_requests": 5})
    steps = json.loads((folder / "steps.json").read_text())["steps"]
    # the server's histograms over the middle step only, on its own clock: that step gets a breakdown
    shift = steps[1]["warmup_end_unix"] - SCRAPES[0]
    no_prefill = {k: v for k, v in FAMILIES.items() if k != "server_prefill_s"}
    rows = [{**r, "unix": r["unix"] + shift, "step": 1} for r in series_rows(obs, families=no_prefill)
            if r["unix"] <= SCRAPES[5]]
    pd.DataFrame(rows)[["unix", "step", "host", "device", "series", "value", "unit"]].to_csv(
        folder / "telemetry_series.csv", index=False)
    summary = analyze(folder)
    mid = summary.steps[1]
    inside = range(1, 5)  # the window is 4 s from the first scrape: intervals ending at scrapes 1..4
    assert mid.server_queue_mean_ms == pytest.approx(expected(obs, "server_queue_s", inside) * 1000)
    assert mid.server_ttft_mean_ms == pytest.approx(expected(obs, "server_ttft_s", inside) * 1000)
    assert mid.server_prefill_mean_ms is None
    assert summary.steps[0].server_ttft_mean_ms is None and summary.steps[0].client_ttft_mean_ms
    assert summary.ttft_breakdown.server_parts["server_prefill_s"] is False
    assert len(summary.ttft_breakdown.notes) == 1
    html = (folder / "report.html").read_text()
    assert "Where TTFT goes" in html and 'alt="where TTFT goes, per step"' in html
    assert html.count("exports no prefill time histogram") == 1  # said once, not per row
    md = (folder / "summary.md").read_text()
    assert "server queue ms" in md and "queue share" in md and "server prefill ms" not in md
    assert (folder / "ttft_breakdown.png").stat().st_size > 0
