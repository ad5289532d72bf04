"""Stability over a long (soak) run: memory / VRAM growth, latency and error drift.

The stability rule (docs/capacity.md): "runs an hour or more without memory leak or VRAM growth". Trends are least-squares
slopes over time; drift compares the first and last thirds of the measured requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from capacity_plugins.contracts.summary import Stability

if TYPE_CHECKING:
    from capacity_plugins.analysis.step_records import Records

SOAK_MIN_S = 1800.0
MIN_SPAN_S = 60.0


def _slope_per_h(t: np.ndarray, v: np.ndarray) -> float | None:
    """The least-squares slope per hour. Times and values are centred first: a fit on raw Unix
    times (~1.7e9 s) is ill-conditioned, and turned a constant series into a slope of rounding
    noise that differed between machines (5e-6 here, 2e-6 there) instead of 0."""
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    if t.size < 3 or np.ptp(t) <= 0:
        return None
    if np.ptp(v) == 0:
        return 0.0
    dt, dv = t - t.mean(), v - v.mean()
    return float((dt @ dv) / (dt @ dt) * 3600.0)


# what the judgement reads of each measured request
COLUMNS = ["sent_unix", "step", "ok", "ttft_ms", "e2e_ms"]


def _measured(req: pd.DataFrame) -> pd.DataFrame:
    # only the columns read here: a copy of every column of millions of records is not free
    return req.loc[~req["warmup"] & (req["error_kind"] != "cancelled"), COLUMNS]


def stability(req: pd.DataFrame, telemetry: pd.DataFrame | None, load_kind: str | None) -> Stability:
    """The run's stability from its records at once."""
    seen = Seen()
    m = _measured(req)
    seen.add(m)
    return _judged(seen, lambda: m, telemetry, load_kind)


class Seen:
    """What the judgement needs first, gathered step by step on the analysis's walk over the
    records (a consumer of `table.step_rows`): the measured requests' send-time span and the steps
    they were in. Only when drift is judged (a soak, or one load step) are the records read whole."""

    def __init__(self) -> None:
        self.lo, self.hi, self.finite = math.inf, -math.inf, 0
        self.steps: set[int] = set()

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        self.add(records.loc[~records["warmup"] & (records["error_kind"] != "cancelled"), ["sent_unix", "step"]])

    def add(self, m: pd.DataFrame) -> None:
        if not len(m):
            return
        self.steps.update(int(s) for s in m["step"].dropna().unique())
        sent = m["sent_unix"].to_numpy(float)
        self.finite += int(np.isfinite(sent).sum())
        if not bool(np.isnan(sent).all()):
            self.lo, self.hi = min(self.lo, float(np.nanmin(sent))), max(self.hi, float(np.nanmax(sent)))

    @property
    def span(self) -> float:
        return self.hi - self.lo if self.finite > 1 else 0.0


def streamed_stability(seen: Seen, records: Records, telemetry: pd.DataFrame | None,
                       load_kind: str | None) -> Stability:
    """The run's stability from what the walk over its steps saw, the records read whole only to judge drift."""
    return _judged(seen, lambda: _measured(records.frame([*COLUMNS, "warmup", "error_kind"])), telemetry, load_kind)


def _judged(seen: Seen, measured: Callable[[], pd.DataFrame], telemetry: pd.DataFrame | None,
            load_kind: str | None) -> Stability:
    span = seen.span
    out = Stability(soak=bool(load_kind == "soak" or span >= SOAK_MIN_S), duration_s=span, findings=[])
    if span < MIN_SPAN_S:
        out.findings.append("run too short for trends")
        return out
    if len(seen.steps) > 1 and load_kind != "soak":
        # Drift and trends compare early with late requests under the same load; across a sweep
        # the load itself changes, so latency "drift" would only restate the sweep.
        out.findings.append(f"{len(seen.steps)} load steps: drift is judged under constant load (soak / hold runs)")
        return out
    m = measured()
    sent = m["sent_unix"].to_numpy(float)
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
