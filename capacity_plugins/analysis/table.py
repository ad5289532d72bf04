"""The per-step table: one row per load step, like the load table in docs/capacity.md, keys named with units.

Latency percentiles come from the raw per-request records (exact, not bucketed), each with its
order-statistic interval (`*_ci_ms`); throughput, SLO attainment and error rate carry theirs too
(analysis/intervals.py). Open-loop steps judge the SLO from the *scheduled* time (what users
feel); the row keeps both views. Each row says whether it may decide (`valid`) and why not
(analysis/validity.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from capacity_plugins.analysis.gaps import EMPTY as EMPTY_GAPS
from capacity_plugins.analysis.gaps import Gaps
from capacity_plugins.analysis.intervals import (
    gain_class,
    half_width,
    littles_rate,
    quantiles_ci,
    rate_ci,
    share_ci,
)
from capacity_plugins.analysis.load import RunData, Step
from capacity_plugins.analysis.step_records import StepConsumer
from capacity_plugins.analysis.step_telemetry import telemetry_for
from capacity_plugins.analysis.ttft_breakdown import TTFTBreakdown
from capacity_plugins.analysis.validity import step_validity
from capacity_plugins.contracts.planning import SLOConfig, VerdictConfig
from capacity_plugins.contracts.slo import LIMITS, share_judgement
from capacity_plugins.contracts.steps import OPEN_LOOP_KINDS
from capacity_plugins.contracts.summary import Judged, Judgement, SloLimit, StepSummary

PCTS = (50, 95, 99)
LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
# The throughput change the step conclusions call a gain (the knee's rule, analysis/knee.py).
GAIN_MIN = 0.10


def pcts_with_ci(values: np.ndarray, prefix: str, confidence: float, n_eff: int | None = None,
                 counts: np.ndarray | None = None) -> dict[str, Any]:
    """`<prefix>_p50_ms`, `_p95_ms`, `_p99_ms` of `values`, each with its interval (`<prefix>_p95_ci_ms`);
    a step row's and a workload class row's percentiles (workloads.py)."""
    out: dict[str, Any] = {}
    qs = [p / 100 for p in PCTS]
    for p, (point, lo, hi) in zip(PCTS, quantiles_ci(values, qs, confidence, n_eff, counts=counts), strict=True):
        out[f"{prefix}_p{p}_ms"] = point
        out[f"{prefix}_p{p}_ci_ms"] = None if point is None else [lo, hi]
    return out


def limit_row(values: np.ndarray | Gaps, limit: float, target: float, confidence: float,
              n_eff: int | None = None) -> SloLimit:
    """One SLO limit on one step: attainment (a missing value counts as over), its quantile, both intervals."""
    if isinstance(values, Gaps):  # a step's ITL gaps: finite, raw or counted by value
        n, share, v, counts = values.size, values.share_at_most(limit), values.values, values.counts
    else:
        v, counts = np.nan_to_num(values, nan=math.inf), None
        n = int(v.size)
        share = float(np.count_nonzero(v <= limit)) / n if n else 0.0
    if n == 0:
        return SloLimit(limit_ms=limit, attainment=None, attainment_ci=None, quantile_ms=None, quantile_ci_ms=None,
                        passed=False, judgement="uncertain")
    m = n_eff if n_eff is not None and n_eff < n else n
    k = int(round(share * m))
    lo, hi = share_ci(k, m, confidence)
    (q, qlo, qhi), = quantiles_ci(v, [target], confidence, n_eff, keep_inf=True, counts=counts)
    return SloLimit(limit_ms=limit, attainment=share, attainment_ci=[lo, hi], quantile_ms=q, quantile_ci_ms=[qlo, qhi],
                    passed=share >= target, judgement=share_judgement(k, m, target, confidence))


def _filled(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), b, a)


def slo_views(step: Step, col: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
    """The per-request latencies the SLO is judged on: from the schedule for open-loop steps.
    `col(name)` gives a column's values for the step's successful requests."""
    open_loop = step.kind in OPEN_LOOP_KINDS and bool((~np.isnan(col("scheduled_unix"))).any())
    ttft, e2e = col("ttft_ms"), col("e2e_ms")
    if open_loop:  # a writer that left *_from_schedule null: fall back to send time, never to "pass"
        ttft = _filled(col("ttft_from_schedule_ms"), ttft)
        e2e = _filled(col("e2e_from_schedule_ms"), e2e)
    tpot = col("tpot_ms")
    # A reasoning answer's first visible content and visible pace (contracts/slo.py reasoning_views)
    visible = col("first_visible_ms")
    if open_loop:
        visible = visible + np.nan_to_num(col("ttft_from_schedule_ms") - col("ttft_ms"), nan=0.0)
    pace = _filled(col("tpot_visible_ms"), tpot)
    tpot = np.where(np.isnan(tpot), 0.0, tpot)  # null when output_tokens <= 1: counted as 0 (vLLM's rule)
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "first_visible_ms": visible,
            "tpot_visible_ms": np.where(np.isnan(pace), 0.0, pace)}


def step_window(st: Step, sent: np.ndarray) -> float | None:
    """The step's measured window: steps.json's, else the span of its measured requests' sends."""
    window = st.window_s
    if window is None and sent.size:
        sent = sent[~np.isnan(sent)]
        window = float(sent.max() - sent.min()) if sent.size > 1 else None
    return window


def step_rows(run: RunData, slo: SLOConfig, also: Sequence[StepConsumer] = ()) -> list[StepSummary]:
    """One row per step of steps.json, from one walk over the records step by step
    (`run.records.steps()`): a step's records are held while its row is computed, then dropped.
    `also`: what else reads each step's records on that walk (`consumer(step value, records)`,
    every step value, -1 included), so that nothing walks the records a second time.

    Each step's ITL percentiles are computed from the steps' gaps (held since the records were
    read) once the walk has counted the step's successful requests; the partitions of millions of
    gaps are most of a big run's analysis and numpy releases the GIL in them, so for a big run
    they run on threads beside the walk (1 M records × 64 gaps: 1.1 s → about 0.5 s on 2 cores)."""
    conf = run.verdict.confidence
    limits = {metric: getattr(slo, key) for metric, key in LIMITS}
    breakdown = TTFTBreakdown(None, run.telemetry)
    steps = {st.index: st for st in run.steps}
    parts: dict[int, _Part] = {}
    big = sum(g.values.size for g in run.itl.values()) >= 1_000_000
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) if big else nullcontext() as pool:
        itl: dict[int, Any] = {}

        def measure(st: Step, records: pd.DataFrame) -> None:
            part = parts[st.index] = _measure(run, st, records, limits, slo, conf, breakdown)
            if pool is not None:
                itl[st.index] = pool.submit(_itl_part, run, st.index, part.n_ok, slo, conf)
            else:
                itl[st.index] = _itl_part(run, st.index, part.n_ok, slo, conf)

        for index, records in run.records.steps():
            for consumer in also:
                consumer(index, records)
            if index in steps:
                measure(steps[index], records)
            del records  # before the next step's columns are allocated (Records.steps)
        for st in run.steps:
            if st.index not in parts:  # no record in this step
                measure(st, run.records.empty())
        got: dict[int, tuple[dict[str, Any], SloLimit | None]] = {
            i: f.result() if isinstance(f, Future) else f for i, f in itl.items()}
    return [_row(parts[st.index], got[st.index][0], got[st.index][1], slo) for st in run.steps]


@dataclass
class _Part:
    """A step's row but for its ITL figures (which wait on the gaps' partitions)."""

    fields: dict[str, Any]
    judged: dict[str, SloLimit]
    n_ok: int
    err_ok: bool


def judge_limits(views: dict[str, np.ndarray], limits: dict[str, float | None], n_ok: int, attainment: float,
                 conf: float) -> tuple[dict[str, SloLimit], np.ndarray]:
    """Each set limit's row (its attainment with the interval) and which of the n_ok successful
    requests met every limit (a missing value misses)."""
    good = np.ones(n_ok, dtype=bool)
    judged: dict[str, SloLimit] = {}
    for metric, limit in limits.items():
        if limit is None:
            continue
        judged[metric] = limit_row(views[metric], limit, attainment, conf)
        good &= np.nan_to_num(views[metric], nan=math.inf) <= limit
    return judged, good


def _measure(run: RunData, st: Step, records: pd.DataFrame, limits: dict[str, float | None], slo: SLOConfig,
             conf: float, breakdown: TTFTBreakdown) -> _Part:
    column = _Columns(records)
    measured = (column("step") >= 0) & ~column("warmup")
    cancelled = (records["error_kind"] == "cancelled").to_numpy(bool)
    mine = np.flatnonzero(measured & ~cancelled)
    ok = mine[column("ok")[mine]]

    def col(name: str, rows: np.ndarray = ok) -> np.ndarray:
        return column(name)[rows]

    n, n_ok = int(mine.size), int(ok.size)
    window = step_window(st, col("sent_unix", mine))
    achieved = st.achieved_rps if st.achieved_rps is not None else (n / window if window else None)
    error_rate = (n - n_ok) / n if n else None
    failed = mine[~column("ok")[mine]]
    errs = records["error_kind"].iloc[failed].fillna("unknown").value_counts()
    pcts: dict[str, Any] = {}
    for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
        pcts.update(pcts_with_ci(col(m), m[:-3], conf))
    open_loop = st.kind in OPEN_LOOP_KINDS and bool((~np.isnan(col("scheduled_unix"))).any())
    if open_loop:
        pcts.update(pcts_with_ci(col("ttft_from_schedule_ms"), "ttft_from_schedule", conf))
        pcts.update(pcts_with_ci(col("e2e_from_schedule_ms"), "e2e_from_schedule", conf))
    out_tok = col("output_tokens")
    e2e = col("e2e_ms")

    # SLO judgement: share of measured requests under each limit (failures count as misses
    # in goodput, and separately through the error rate).
    judged, good = judge_limits(slo_views(st, col), limits, n_ok, slo.attainment, conf)
    n_good = int(good.sum())
    err_ok = error_rate is not None and error_rate <= slo.error_rate
    validity = step_validity(st, requests=n, ok_requests=n_ok, window_s=window, settings=run.settings,
                             meta=run.meta)
    fields = dict(
        step=st.index, kind=st.kind, level=st.level, arm=st.arm, window_s=window,
        target_rps=st.target_rps, offered_rps=st.offered_rps, achieved_rps=achieved,
        requests=n, ok_requests=n_ok, errors=n - n_ok,
        cancelled=int(np.count_nonzero(measured & cancelled)),
        error_rate=error_rate, error_rate_ci=list(share_ci(n - n_ok, n, conf)) if n else None,
        **_throughput(st, n_ok, n_ok / window if window else None, col, mine, window, conf),
        error_kinds={str(k): int(v) for k, v in errs.items()},
        **pcts,
        open_loop=open_loop,
        output_tokens_per_s=float(np.nansum(out_tok)) / window if window else None,
        output_tokens_mean=float(np.nanmean(out_tok)) if n_ok and np.isfinite(out_tok).any() else None,
        e2e_mean_ms=float(np.nanmean(e2e)) if n_ok and not bool(np.isnan(e2e).all()) else None,
        goodput_rps=n_good / window if window else None,
        good_requests=n_good,
        slo_attainment=n_good / n if n else None,
        **telemetry_for(run, st),
        **breakdown.row(st, records),
        **asdict(validity),
    )
    return _Part(fields, judged, n_ok, err_ok)


def _itl_part(run: RunData, index: int, n_ok: int, slo: SLOConfig,
              conf: float) -> tuple[dict[str, Any], SloLimit | None]:
    """A step's ITL percentiles with their intervals, and its ITL limit's row when the SLO has one."""
    gaps = run.itl.get(index, EMPTY_GAPS)
    # Gaps of one request are not independent: their intervals count requests, not gaps.
    pcts = pcts_with_ci(gaps.values, "itl", conf, n_eff=n_ok, counts=gaps.counts)
    limit = None
    if slo.itl_p95_ms is not None:
        limit = limit_row(gaps, slo.itl_p95_ms, slo.attainment, conf, n_eff=n_ok)
    return pcts, limit


def _row(part: _Part, itl: dict[str, Any], itl_limit: SloLimit | None, slo: SLOConfig) -> StepSummary:
    judged = part.judged
    if itl_limit is not None:
        judged["itl_ms"] = itl_limit
    row = StepSummary(**part.fields, **itl, slo=judged,
                      slo_pass=bool(part.n_ok > 0 and part.err_ok and all(v.passed for v in judged.values())))
    row.slo_judgement = slo_judgement(row, slo)
    return row


class _Columns:
    """A frame's numeric columns as numpy arrays, each converted once (views where pandas can)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame
        self._seen: dict[str, np.ndarray] = {}

    def __call__(self, name: str) -> np.ndarray:
        got = self._seen.get(name)
        if got is None:
            s = self._frame[name]
            kind = bool if s.dtype == bool else (np.int64 if name == "step" else float)
            got = self._seen[name] = s.to_numpy(kind)
        return got


def slo_judgement(row: Judged, slo: SLOConfig) -> Judgement:
    """pass / fail / uncertain for the whole step (or one class in it): every latency limit with its interval.

    The error rate is judged on its point value, as the capacity's interval does (capacity.py says
    why); its own interval stays in the row (`error_rate_ci`).
    """
    if not row.ok_requests:
        return "fail"
    judged = [v.judgement for v in row.slo.values()]
    judged.append("pass" if (row.error_rate or 0.0) <= slo.error_rate else "fail")
    if "fail" in judged:
        return "fail"
    return "pass" if all(j == "pass" for j in judged) else "uncertain"


def _throughput(st: Step, n_ok: int, counted_rps: float | None, col: Callable[..., np.ndarray], mine: np.ndarray,
                window: float | None, conf: float) -> dict[str, Any]:
    """A step's `rps` and its interval: Little's law for a closed loop, the count otherwise.

    The count (successful requests / window, batch-means interval) is always computed; in a
    closed loop it is the cross-check of Little's law (intervals.py says why that is the sharper
    estimator). When the two disagree beyond both intervals the loop was not closed as assumed
    (users idle between requests, a client that could not keep up): the count is used and the
    row says so.
    """
    n = int(mine.size)
    begin = st.warmup_end_unix or st.start_unix
    lo, hi, how = rate_ci(col("sent_unix"), begin, window, n_ok, conf)
    counted = {"rps": counted_rps, "rps_ci": None if how is None else [lo, hi], "rps_ci_method": how,
               "rps_method": "counting", "rps_counted": counted_rps,
               "rps_counted_ci": None if how is None else [lo, hi], "rps_methods_agree": None}
    if st.kind != "concurrency" or not n or counted_rps is None:
        return counted
    e2e = col("e2e_ms", mine)
    little = littles_rate(float(st.level), e2e, e2e - col("ttft_ms", mine), col("sent_unix", mine), begin, window,
                          n_ok / n, conf)
    if little is None:
        return counted
    point, l_lo, l_hi = little
    c_half = half_width(counted_rps, lo, hi) if how is not None else 0.0
    agree = abs(point - counted_rps) <= math.hypot(half_width(point, l_lo, l_hi), c_half)
    if not agree:
        return {**counted, "rps_methods_agree": False, "rps_littles_law": point}
    return {**counted, "rps": point, "rps_ci": [l_lo, l_hi], "rps_ci_method": "littles_law",
            "rps_method": "littles_law", "rps_methods_agree": True}


def rps_half_width(row: StepSummary) -> float:
    """Half-width of a row's throughput interval (0 when it has none: a point comparison)."""
    ci = row.rps_ci
    if not ci:
        return 0.0
    return half_width(row.rps, ci[0], ci[1])


def conclude(rows: list[StepSummary], slo: SLOConfig, vc: VerdictConfig) -> None:
    """A one-line reading per step, in the method's words (GPU not saturated, queueing starts, …).

    A throughput change is called a gain only when it exceeds the noise of both steps.
    """
    prev: StepSummary | None = None
    base_p95 = next((r.e2e_p95_ms for r in rows if r.valid and r.e2e_p95_ms), None)
    for r in rows:
        notes: list[str] = []
        if not r.requests:
            r.conclusion = "no measured requests"
            continue
        if r.ok_requests == 0:
            r.conclusion = "all requests failed"
            continue
        if not r.valid:
            r.conclusion = "invalid: " + "; ".join(r.invalid_reasons) + " — decides nothing"
            continue
        if r.error_rate and r.error_rate > slo.error_rate:
            notes.append(f"errors {r.error_rate:.1%}")
        if prev is not None and prev.rps and r.rps:
            gain = r.rps / prev.rps - 1
            cls = gain_class(r.rps, rps_half_width(r), prev.rps, rps_half_width(prev), GAIN_MIN)
            lat = (r.e2e_p95_ms or 0) / prev.e2e_p95_ms if prev.e2e_p95_ms else None
            noisy = " (within noise)" if cls == "unclear" else ""
            if cls != "rise" and lat and lat >= 1.3:
                notes.append(f"saturated: throughput {gain:+.0%}{noisy}, latency ×{lat:.1f}")
            elif cls != "rise":
                notes.append(f"throughput flat ({gain:+.0%}{noisy})")
            elif lat and lat >= 1.3:
                notes.append(f"queueing starts: latency ×{lat:.1f} for {gain:+.0%} throughput")
            else:
                notes.append(f"throughput {gain:+.0%}")
        elif base_p95 and r.e2e_p95_ms:
            notes.append("baseline")
        if r.offered_rps and r.achieved_rps and r.achieved_rps / r.offered_rps < 0.95:
            notes.append(f"achieved {r.achieved_rps / r.offered_rps:.0%} of offered")
        gu = r.gpu_util_pct
        if gu is not None:
            notes.append("GPU not saturated" if gu < vc.gpu_low_pct else
                         ("GPU saturated" if gu >= vc.gpu_busy_pct else f"GPU {gu:.0f}%"))
        if r.kv_cache_usage_max is not None and r.kv_cache_usage_max >= vc.kv_cache_full:
            notes.append("KV cache near full")
        if r.server_waiting is not None and r.server_waiting >= 1:
            notes.append(f"server queue {r.server_waiting:.1f}")
        notes.append({"pass": "SLO met", "fail": "SLO missed"}.get(r.slo_judgement,
                     "SLO met (within noise)" if r.slo_pass else "SLO missed (within noise)"))
        r.conclusion = "; ".join(notes)
        prev = r
