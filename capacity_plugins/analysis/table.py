"""The per-step table: one row per load step, like the load table in docs/capacity.md, keys named with units.

Latency percentiles come from the raw per-request records (exact, not bucketed). Open-loop steps
judge the SLO from the *scheduled* time (what users feel); the row keeps both views.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
import pandas as pd

from capacity_plugins.analysis.load import RunData, Step
from capacity_plugins.contracts.percentiles import NUMPY_METHOD
from capacity_plugins.contracts.planning import SLOConfig

PCTS = (50, 95, 99)
# One percentile definition across the product (contracts/percentiles.py): nearest rank.
NEAREST_RANK: Final = NUMPY_METHOD
LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")


def _pcts(values: np.ndarray, prefix: str) -> dict[str, float | None]:
    fin = np.isfinite(values)
    v = values if fin.all() else values[fin]
    if v.size == 0:
        return {f"{prefix}_p{p}_ms": None for p in PCTS}
    qs = np.percentile(v, PCTS, method=NEAREST_RANK)
    return {f"{prefix}_p{p}_ms": float(q) for p, q in zip(PCTS, qs, strict=True)}


def _share_under(values: np.ndarray, limit: float) -> float | None:
    """Share of requests at or under a limit; a missing value (no first token) counts as over."""
    if values.size == 0:
        return None
    return float(np.mean(np.nan_to_num(values, nan=math.inf) <= limit))


def _quantile(values: np.ndarray, q: float) -> float | None:
    v = np.nan_to_num(values, nan=math.inf)
    if v.size == 0:
        return None
    x = float(np.quantile(v, q, method=NEAREST_RANK))
    return x if math.isfinite(x) else math.inf


def slo_views(step: Step, ok: pd.DataFrame) -> dict[str, np.ndarray]:
    """The per-request latencies the SLO is judged on: from the schedule for open-loop steps."""
    open_loop = step.kind in ("rate", "peak") and ok["scheduled_unix"].notna().any()
    ttft = ok["ttft_from_schedule_ms"] if open_loop else ok["ttft_ms"]
    e2e = ok["e2e_from_schedule_ms"] if open_loop else ok["e2e_ms"]
    if open_loop:  # a writer that left *_from_schedule null: fall back to send time, never to "pass"
        ttft = ttft.fillna(ok["ttft_ms"])
        e2e = e2e.fillna(ok["e2e_ms"])
    tpot = ok["tpot_ms"].fillna(0.0)  # null when output_tokens <= 1: counted as 0 (vLLM's rule)
    return {"ttft_ms": ttft.to_numpy(float), "tpot_ms": tpot.to_numpy(float), "e2e_ms": e2e.to_numpy(float)}


def _telemetry_for(run: RunData, step: Step) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        "gpu_util_pct": None, "gpu_util_max_pct": None, "sm_active": None, "vram_used_gb": None,
        "vram_total_gb": None, "gpu_temp_max_c": None, "gpu_power_w": None, "server_running": None,
        "server_waiting": None, "server_waiting_max": None, "kv_cache_usage_max": None,
        "client_cpu_max_pct": step.client_cpu_max_pct,
    }
    t = run.telemetry
    if t is None or t.empty:
        return out
    if "step" in t.columns and t["step"].notna().any():
        sel = t[t["step"] == step.index]
    else:
        begin = step.warmup_end_unix or step.start_unix
        if begin is None or step.end_unix is None:
            return out
        sel = t[(t["unix"] >= begin) & (t["unix"] <= step.end_unix)]
    if sel.empty:
        return out
    by = {s: g for s, g in sel.groupby("series")}

    def agg(series: str, how: str) -> float | None:
        g = by.get(series)
        if g is None or g["value"].dropna().empty:
            return None
        keys = [c for c in ("host", "device") if c in g.columns]
        # Mean over time per device, then the mean (or max) over devices: a node's figure.
        per_dev = g.groupby(keys, dropna=False)["value"] if keys else g["value"]
        if how == "mean":
            return float(per_dev.mean().mean()) if keys else float(per_dev.mean())
        if how == "sum_mean":  # gauges of one server split per engine/device add up
            return float(g.groupby("unix")["value"].sum().mean())
        if how == "sum_max":
            return float(g.groupby("unix")["value"].sum().max())
        return float(g["value"].max())

    out["gpu_util_pct"] = agg("gpu_util_pct", "mean")
    out["gpu_util_max_pct"] = agg("gpu_util_pct", "max")
    out["sm_active"] = agg("sm_active", "mean")
    v = agg("vram_used_bytes", "max")
    out["vram_used_gb"] = v / 1e9 if v is not None else None
    v = agg("vram_total_bytes", "max")
    out["vram_total_gb"] = v / 1e9 if v is not None else None
    out["gpu_temp_max_c"] = agg("gpu_temp_c", "max")
    out["gpu_power_w"] = agg("gpu_power_w", "mean")
    out["server_running"] = agg("server_running", "sum_mean")
    out["server_waiting"] = agg("server_waiting", "sum_mean")
    out["server_waiting_max"] = agg("server_waiting", "sum_max")
    out["kv_cache_usage_max"] = agg("kv_cache_usage", "max")
    cpu = agg("client_cpu_pct", "max")
    if cpu is not None:
        out["client_cpu_max_pct"] = max(cpu, step.client_cpu_max_pct or 0.0)
    return out


def step_rows(run: RunData, slo: SLOConfig) -> list[dict[str, Any]]:
    req = run.requests
    measured = req[(req["step"] >= 0) & ~req["warmup"]]
    cancelled = measured["error_kind"] == "cancelled"
    groups = {s: g for s, g in measured[~cancelled].groupby("step")}
    cancelled_counts = measured[cancelled].groupby("step").size().to_dict()
    itl_by_step = _split_itl(run)
    limits = {k: getattr(slo, f"{k[:-3]}_p95_ms") for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
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
            "step": st.index, "kind": st.kind, "level": st.level, "window_s": window,
            "target_rps": st.target_rps, "offered_rps": st.offered_rps, "achieved_rps": achieved,
            "requests": n, "ok_requests": n_ok, "errors": n - n_ok,
            "cancelled": int(cancelled_counts.get(st.index, 0)),
            "error_rate": (n - n_ok) / n if n else None,
            "rps": n_ok / window if window else None,
        }
        errs = g.loc[~g["ok"], "error_kind"].fillna("unknown").value_counts()
        row["error_kinds"] = {str(k): int(v) for k, v in errs.items()}
        for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
            row.update(_pcts(ok[m].to_numpy(float), m[:-3]))
        row.update(_pcts(itl_by_step.get(st.index, np.empty(0)), "itl"))
        open_loop = st.kind in ("rate", "peak") and ok["scheduled_unix"].notna().any()
        row["open_loop"] = bool(open_loop)
        if open_loop:
            row.update(_pcts(ok["ttft_from_schedule_ms"].to_numpy(float), "ttft_from_schedule"))
            row.update(_pcts(ok["e2e_from_schedule_ms"].to_numpy(float), "e2e_from_schedule"))
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
            vals = views[m]
            share = _share_under(vals, lim)
            q = _quantile(vals, slo.attainment)
            row["slo"][m] = {"limit_ms": lim, "attainment": share, "quantile_ms": q,
                             "pass": share is not None and share >= slo.attainment}
            good &= np.nan_to_num(vals, nan=math.inf) <= lim
        if slo.itl_p95_ms is not None:
            itl = itl_by_step.get(st.index, np.empty(0))
            share = _share_under(itl, slo.itl_p95_ms)
            row["slo"]["itl_ms"] = {"limit_ms": slo.itl_p95_ms, "attainment": share,
                                    "quantile_ms": _quantile(itl, slo.attainment) if itl.size else None,
                                    "pass": share is not None and share >= slo.attainment}
        n_good = int(good.sum())
        row["goodput_rps"] = n_good / window if window else None
        row["good_requests"] = n_good
        row["slo_attainment"] = n_good / n if n else None
        err_ok = row["error_rate"] is not None and row["error_rate"] <= slo.error_rate
        row["slo_pass"] = bool(n_ok > 0 and err_ok and all(v["pass"] for v in row["slo"].values()))
        row.update(_telemetry_for(run, st))
        row["client_limited"] = st.client_limited
        row["client_limited_reason"] = st.client_limited_reason
        row["schedule_lag_p99_ms"] = st.schedule_lag_p99_ms
        row["valid"] = bool(not st.client_limited and n_ok > 0 and window)
        rows.append(row)
    _conclude(rows)
    return rows


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


def _conclude(rows: list[dict[str, Any]]) -> None:
    """A one-line reading per step, in the method's words (GPU not saturated, queueing starts, …)."""
    prev: dict[str, Any] | None = None
    base_p95 = next((r["e2e_p95_ms"] for r in rows if r["valid"] and r["e2e_p95_ms"]), None)
    for r in rows:
        notes: list[str] = []
        if r["client_limited"]:
            r["conclusion"] = f"invalid: load generator was the limit ({r['client_limited_reason'] or 'client-limited'})"
            prev = None
            continue
        if not r["requests"]:
            r["conclusion"] = "no measured requests"
            continue
        if r["ok_requests"] == 0:
            r["conclusion"] = "all requests failed"
            continue
        if r["error_rate"] and r["error_rate"] > 0.01:
            notes.append(f"errors {r['error_rate']:.1%}")
        if prev is not None and prev.get("rps") and r.get("rps"):
            gain = r["rps"] / prev["rps"] - 1
            lat = (r["e2e_p95_ms"] or 0) / prev["e2e_p95_ms"] if prev.get("e2e_p95_ms") else None
            if gain < 0.10 and lat and lat >= 1.3:
                notes.append(f"saturated: throughput {gain:+.0%}, latency ×{lat:.1f}")
            elif gain < 0.10:
                notes.append(f"throughput flat ({gain:+.0%})")
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
            notes.append("GPU not saturated" if gu < 50 else ("GPU saturated" if gu >= 85 else f"GPU {gu:.0f}%"))
        if r.get("kv_cache_usage_max") is not None and r["kv_cache_usage_max"] >= 0.9:
            notes.append("KV cache near full")
        if r.get("server_waiting") is not None and r["server_waiting"] >= 1:
            notes.append(f"server queue {r['server_waiting']:.1f}")
        notes.append("SLO met" if r["slo_pass"] else "SLO missed")
        r["conclusion"] = "; ".join(notes)
        prev = r
