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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from capacity_plugins.analysis.intervals import gain_class, half_width, quantiles_ci, rate_ci, share_ci
from capacity_plugins.analysis.load import RunData, Step
from capacity_plugins.analysis.step_telemetry import telemetry_for
from capacity_plugins.analysis.ttft_breakdown import TTFTBreakdown
from capacity_plugins.analysis.validity import step_validity
from capacity_plugins.contracts.planning import SLOConfig, VerdictConfig
from capacity_plugins.contracts.slo import share_judgement
from capacity_plugins.contracts.steps import OPEN_LOOP_KINDS

PCTS = (50, 95, 99)
LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
# The throughput change the step conclusions call a gain (the knee's rule, analysis/knee.py).
GAIN_MIN = 0.10


def _pcts(values: np.ndarray, prefix: str, confidence: float, n_eff: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p, (point, lo, hi) in zip(PCTS, quantiles_ci(values, [p / 100 for p in PCTS], confidence, n_eff), strict=True):
        out[f"{prefix}_p{p}_ms"] = point
        out[f"{prefix}_p{p}_ci_ms"] = None if point is None else [lo, hi]
    return out


def _limit_row(values: np.ndarray, limit: float, target: float, confidence: float,
               n_eff: int | None = None) -> dict[str, Any]:
    """One SLO limit on one step: attainment (a missing value counts as over), its quantile, both intervals."""
    v = np.nan_to_num(values, nan=math.inf)
    n = int(v.size)
    if n == 0:
        return {"limit_ms": limit, "attainment": None, "attainment_ci": None, "quantile_ms": None,
                "quantile_ci_ms": None, "pass": False, "judgement": "uncertain"}
    share = float(np.count_nonzero(v <= limit)) / n
    m = n_eff if n_eff is not None and n_eff < n else n
    k = int(round(share * m))
    lo, hi = share_ci(k, m, confidence)
    (q, qlo, qhi), = quantiles_ci(v, [target], confidence, n_eff, keep_inf=True)
    return {"limit_ms": limit, "attainment": share, "attainment_ci": [lo, hi], "quantile_ms": q,
            "quantile_ci_ms": [qlo, qhi], "pass": share >= target,
            "judgement": share_judgement(k, m, target, confidence)}


def slo_views(step: Step, ok: pd.DataFrame) -> dict[str, np.ndarray]:
    """The per-request latencies the SLO is judged on: from the schedule for open-loop steps."""
    open_loop = step.kind in OPEN_LOOP_KINDS and ok["scheduled_unix"].notna().any()
    ttft = ok["ttft_from_schedule_ms"] if open_loop else ok["ttft_ms"]
    e2e = ok["e2e_from_schedule_ms"] if open_loop else ok["e2e_ms"]
    if open_loop:  # a writer that left *_from_schedule null: fall back to send time, never to "pass"
        ttft = ttft.fillna(ok["ttft_ms"])
        e2e = e2e.fillna(ok["e2e_ms"])
    tpot = ok["tpot_ms"].fillna(0.0)  # null when output_tokens <= 1: counted as 0 (vLLM's rule)
    return {"ttft_ms": ttft.to_numpy(float), "tpot_ms": tpot.to_numpy(float), "e2e_ms": e2e.to_numpy(float)}


def step_rows(run: RunData, slo: SLOConfig) -> list[dict[str, Any]]:
    conf = run.verdict.confidence
    req = run.requests
    measured = req[(req["step"] >= 0) & ~req["warmup"]]
    cancelled = measured["error_kind"] == "cancelled"
    groups = {s: g for s, g in measured[~cancelled].groupby("step")}
    cancelled_counts = measured[cancelled].groupby("step").size().to_dict()
    itl_by_step = _split_itl(run)
    itl_pcts = _itl_pcts(run, itl_by_step, groups, conf)
    limits = {k: getattr(slo, f"{k[:-3]}_p95_ms") for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
    breakdown = TTFTBreakdown(req, run.telemetry)
    rows: list[dict[str, Any]] = []
    for st in run.steps:
        g = groups.get(st.index, req.iloc[0:0])
        ok = g[g["ok"]]
        n, n_ok = len(g), len(ok)
        window = st.window_s
        if window is None and n:
            sent = g["sent_unix"].dropna()
            window = float(sent.max() - sent.min()) if len(sent) > 1 else None
        achieved = st.achieved_rps if st.achieved_rps is not None else (n / window if window else None)
        row: dict[str, Any] = {
            "step": st.index, "kind": st.kind, "level": st.level, "arm": st.arm, "window_s": window,
            "target_rps": st.target_rps, "offered_rps": st.offered_rps, "achieved_rps": achieved,
            "requests": n, "ok_requests": n_ok, "errors": n - n_ok,
            "cancelled": int(cancelled_counts.get(st.index, 0)),
            "error_rate": (n - n_ok) / n if n else None,
            "error_rate_ci": list(share_ci(n - n_ok, n, conf)) if n else None,
            "rps": n_ok / window if window else None,
        }
        lo, hi, how = rate_ci(ok["sent_unix"].to_numpy(float), st.warmup_end_unix or st.start_unix, window, n_ok, conf)
        row["rps_ci"] = None if how is None else [lo, hi]
        row["rps_ci_method"] = how
        errs = g.loc[~g["ok"], "error_kind"].fillna("unknown").value_counts()
        row["error_kinds"] = {str(k): int(v) for k, v in errs.items()}
        for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
            row.update(_pcts(ok[m].to_numpy(float), m[:-3], conf))
        itl = itl_by_step.get(st.index, np.empty(0))
        row.update(itl_pcts[st.index])
        open_loop = st.kind in OPEN_LOOP_KINDS and ok["scheduled_unix"].notna().any()
        row["open_loop"] = bool(open_loop)
        if open_loop:
            row.update(_pcts(ok["ttft_from_schedule_ms"].to_numpy(float), "ttft_from_schedule", conf))
            row.update(_pcts(ok["e2e_from_schedule_ms"].to_numpy(float), "e2e_from_schedule", conf))
        out_tok = ok["output_tokens"].to_numpy(float)
        row["output_tokens_per_s"] = float(np.nansum(out_tok)) / window if window else None
        row["output_tokens_mean"] = float(np.nanmean(out_tok)) if n_ok and np.isfinite(out_tok).any() else None
        row["e2e_mean_ms"] = float(ok["e2e_ms"].mean()) if n_ok else None

        # SLO judgement: share of measured requests under each limit (failures count as misses
        # in goodput, and separately through the error rate).
        views = slo_views(st, ok)
        good = np.ones(n_ok, dtype=bool)
        row["slo"] = {}
        for m, lim in limits.items():
            if lim is None:
                continue
            row["slo"][m] = _limit_row(views[m], lim, slo.attainment, conf)
            good &= np.nan_to_num(views[m], nan=math.inf) <= lim
        if slo.itl_p95_ms is not None:
            row["slo"]["itl_ms"] = _limit_row(itl, slo.itl_p95_ms, slo.attainment, conf, n_eff=n_ok)
        n_good = int(good.sum())
        row["goodput_rps"] = n_good / window if window else None
        row["good_requests"] = n_good
        row["slo_attainment"] = n_good / n if n else None
        err_ok = row["error_rate"] is not None and row["error_rate"] <= slo.error_rate
        row["slo_pass"] = bool(n_ok > 0 and err_ok and all(v["pass"] for v in row["slo"].values()))
        row["slo_judgement"] = _slo_judgement(row, slo)
        row.update(telemetry_for(run, st))
        row.update(breakdown.row(st))
        row.update(step_validity(st, requests=n, ok_requests=n_ok, window_s=window, settings=run.settings,
                                 meta=run.meta))
        rows.append(row)
    if run.settings.workloads:
        # Classes: each judged by its own SLO; the step's SLO fields become the mix's.
        from capacity_plugins.analysis.workloads import add_class_rows

        add_class_rows(run, rows)
    _conclude(rows, slo, run.verdict)
    return rows


def _slo_judgement(row: dict[str, Any], slo: SLOConfig) -> str:
    """pass / fail / uncertain for the whole step: every latency limit with its interval.

    The error rate is judged on its point value, as the capacity's interval does (capacity.py says
    why); its own interval stays in the row (`error_rate_ci`).
    """
    if not row["ok_requests"]:
        return "fail"
    judged = [v["judgement"] for v in row["slo"].values()]
    judged.append("pass" if (row["error_rate"] or 0.0) <= slo.error_rate else "fail")
    if "fail" in judged:
        return "fail"
    return "pass" if all(j == "pass" for j in judged) else "uncertain"


def _itl_pcts(run: RunData, itl_by_step: dict[int, np.ndarray], groups: dict[Any, pd.DataFrame],
              confidence: float) -> dict[int, dict[str, Any]]:
    """Each step's ITL percentiles with their intervals. The partitions of millions of gaps are
    most of a big run's analysis; numpy releases the GIL in them, so the steps run two at a time
    (1 M records × 64 gaps: 1.1 s → about 0.5 s on 2 cores)."""
    def one(index: int) -> dict[str, Any]:
        g = groups.get(index)
        n_ok = 0 if g is None else int(g["ok"].sum())
        # Gaps of one request are not independent: their intervals count requests, not gaps.
        return _pcts(itl_by_step.get(index, np.empty(0)), "itl", confidence, n_eff=n_ok)

    indexes = [st.index for st in run.steps]
    if sum(v.size for v in itl_by_step.values()) < 1_000_000:
        return {i: one(i) for i in indexes}
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return dict(zip(indexes, pool.map(one, indexes), strict=True))


def _split_itl(run: RunData) -> dict[int, np.ndarray]:
    """ITL gaps per step. One boolean pass per step: cheaper than sorting tens of millions of gaps."""
    out: dict[int, np.ndarray] = {}
    if run.itl_values.size == 0:
        return out
    s = run.itl_steps
    # Records are written step after step (the shape drains between steps), so the gaps are
    # usually already grouped: then each step is a slice, found by binary search.
    if s.size and bool(np.all(s[1:] >= s[:-1])):
        keys = np.array([st.index for st in run.steps], dtype=s.dtype)  # same dtype: no 64 M-element cast
        los, his = np.searchsorted(s, keys, "left"), np.searchsorted(s, keys, "right")
        for st, lo, hi in zip(run.steps, los, his, strict=True):
            if hi > lo:
                out[st.index] = run.itl_values[lo:hi]
        return out
    for st in run.steps:
        sel = run.itl_values[run.itl_steps == st.index]
        if sel.size:
            out[st.index] = sel
    return out


def rps_half_width(row: dict[str, Any]) -> float:
    """Half-width of a row's throughput interval (0 when it has none: a point comparison)."""
    ci = row.get("rps_ci")
    if not ci:
        return 0.0
    return half_width(row.get("rps"), ci[0], ci[1])


def _conclude(rows: list[dict[str, Any]], slo: SLOConfig, vc: VerdictConfig) -> None:
    """A one-line reading per step, in the method's words (GPU not saturated, queueing starts, …).

    A throughput change is called a gain only when it exceeds the noise of both steps.
    """
    prev: dict[str, Any] | None = None
    base_p95 = next((r["e2e_p95_ms"] for r in rows if r["valid"] and r["e2e_p95_ms"]), None)
    for r in rows:
        notes: list[str] = []
        if not r["requests"]:
            r["conclusion"] = "no measured requests"
            continue
        if r["ok_requests"] == 0:
            r["conclusion"] = "all requests failed"
            continue
        if not r["valid"]:
            r["conclusion"] = "invalid: " + "; ".join(r["invalid_reasons"]) + " — decides nothing"
            continue
        if r["error_rate"] and r["error_rate"] > slo.error_rate:
            notes.append(f"errors {r['error_rate']:.1%}")
        if prev is not None and prev.get("rps") and r.get("rps"):
            gain = r["rps"] / prev["rps"] - 1
            cls = gain_class(r["rps"], rps_half_width(r), prev["rps"], rps_half_width(prev), GAIN_MIN)
            lat = (r["e2e_p95_ms"] or 0) / prev["e2e_p95_ms"] if prev.get("e2e_p95_ms") else None
            noisy = " (within noise)" if cls == "unclear" else ""
            if cls != "rise" and lat and lat >= 1.3:
                notes.append(f"saturated: throughput {gain:+.0%}{noisy}, latency ×{lat:.1f}")
            elif cls != "rise":
                notes.append(f"throughput flat ({gain:+.0%}{noisy})")
            elif lat and lat >= 1.3:
                notes.append(f"queueing starts: latency ×{lat:.1f} for {gain:+.0%} throughput")
            else:
                notes.append(f"throughput {gain:+.0%}")
        elif base_p95 and r["e2e_p95_ms"]:
            notes.append("baseline")
        if r.get("offered_rps") and r.get("achieved_rps") and r["achieved_rps"] / r["offered_rps"] < 0.95:
            notes.append(f"achieved {r['achieved_rps'] / r['offered_rps']:.0%} of offered")
        gu = r.get("gpu_util_pct")
        if gu is not None:
            notes.append("GPU not saturated" if gu < vc.gpu_low_pct else
                         ("GPU saturated" if gu >= vc.gpu_busy_pct else f"GPU {gu:.0f}%"))
        if r.get("kv_cache_usage_max") is not None and r["kv_cache_usage_max"] >= vc.kv_cache_full:
            notes.append("KV cache near full")
        if r.get("server_waiting") is not None and r["server_waiting"] >= 1:
            notes.append(f"server queue {r['server_waiting']:.1f}")
        notes.append({"pass": "SLO met", "fail": "SLO missed"}.get(r["slo_judgement"],
                     "SLO met (within noise)" if r["slo_pass"] else "SLO missed (within noise)"))
        r["conclusion"] = "; ".join(notes)
        prev = r
