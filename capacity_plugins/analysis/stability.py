"""Stability over a long (soak) run: memory / VRAM growth, latency and error drift.

The stability rule (docs/capacity.md): "runs an hour or more without memory leak or VRAM growth". Trends are least-squares
slopes over time; drift compares the first and last thirds of the measured requests.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capacity_plugins.contracts.summary import Stability

SOAK_MIN_S = 1800.0
MIN_SPAN_S = 60.0


def _slope_per_h(t: np.ndarray, v: np.ndarray) -> float | None:
    ok = np.isfinite(t) & np.isfinite(v)
    if ok.sum() < 3 or np.ptp(t[ok]) <= 0:
        return None
    return float(np.polyfit(t[ok], v[ok], 1)[0] * 3600.0)


def stability(req: pd.DataFrame, telemetry: pd.DataFrame | None, load_kind: str | None) -> Stability:
    # only the columns read here: a copy of every column of millions of records is not free
    m = req.loc[~req["warmup"] & (req["error_kind"] != "cancelled"), ["sent_unix", "step", "ok", "ttft_ms", "e2e_ms"]]
    sent = m["sent_unix"].to_numpy(float)
    span = float(np.nanmax(sent) - np.nanmin(sent)) if np.isfinite(sent).sum() > 1 else 0.0
    out = Stability(soak=bool(load_kind == "soak" or span >= SOAK_MIN_S), duration_s=span, findings=[])
    if span < MIN_SPAN_S:
        out.findings.append("run too short for trends")
        return out
    steps = m["step"].dropna().unique() if "step" in m else []
    if len(steps) > 1 and load_kind != "soak":
        # Drift and trends compare early with late requests under the same load; across a sweep
        # the load itself changes, so latency "drift" would only restate the sweep.
        out.findings.append(f"{len(steps)} load steps: drift is judged under constant load (soak / hold runs)")
        return out
    order = np.argsort(sent)
    thirds = np.array_split(order, 3)
    first, last = m.iloc[thirds[0]], m.iloc[thirds[-1]]

    def p95(df: pd.DataFrame, col: str) -> float | None:
        v = df.loc[df["ok"], col].dropna()
        return float(np.percentile(v, 95, method="inverted_cdf")) if len(v) else None  # nearest rank

    drift = {col: (p95(first, col), p95(last, col)) for col in ("ttft_ms", "e2e_ms")}
    for col, (a, b) in drift.items():
        if a and b and b / a > 1.25:
            out.findings.append(f"{col[:-3].upper()} P95 drifted ×{b / a:.2f} from the first to the last third")
    out.ttft_p95_first_third_ms, out.ttft_p95_last_third_ms = drift["ttft_ms"]
    out.e2e_p95_first_third_ms, out.e2e_p95_last_third_ms = drift["e2e_ms"]
    e0 = float((~first["ok"]).mean()) if len(first) else None
    e1 = float((~last["ok"]).mean()) if len(last) else None
    out.error_rate_first_third, out.error_rate_last_third = e0, e1
    if e0 is not None and e1 is not None and e1 - e0 > 0.01:
        out.findings.append(f"error rate rose from {e0:.1%} to {e1:.1%}")
    if telemetry is not None and not telemetry.empty:
        trends = {}
        for series in ("vram_used_bytes", "kv_cache_usage", "server_waiting", "gpu_temp_c"):
            g = telemetry[telemetry["series"] == series]
            if g.empty:
                continue
            # A sum over devices per timestamp: fleet-level growth is what leaks look like.
            agg = g.groupby("unix")["value"].sum()
            slope = _slope_per_h(agg.index.to_numpy(float), agg.to_numpy(float))
            if slope is None:
                continue
            trends[f"{series}_per_h"] = slope
            if series == "vram_used_bytes" and slope > 0 and agg.iloc[0] > 0 and slope / float(agg.iloc[0]) > 0.02:
                out.findings.append(f"VRAM grows {slope / 1e9:.2f} GB/h ({slope / float(agg.iloc[0]):.1%}/h): possible leak")
        out.trends = trends
    if not out.findings:
        out.findings.append("no drift found")
    return out
