"""A step's telemetry: means and maxima of telemetry_series.csv over its measured window.

Mean over time per device, then over devices (a node's figure); server gauges that are split per
engine add up. When the run's target was the embedded simulator these readings are simulated,
which the run facts say and the report labels.
"""

from __future__ import annotations

from typing import Any

from capacity_plugins.analysis.load import RunData, Step


def step_rows(run: RunData, step: Step) -> Any:
    """The run's telemetry rows of the step's measured window (by their step column where the
    run tagged them, else by time); None without telemetry or without the step's window."""
    t = run.telemetry
    if t is None or t.empty:
        return None
    if "step" in t.columns and t["step"].notna().any():
        return t[t["step"] == step.index]
    begin = step.warmup_end_unix or step.start_unix
    if begin is None or step.end_unix is None:
        return None
    return t[(t["unix"] >= begin) & (t["unix"] <= step.end_unix)]


def telemetry_for(run: RunData, step: Step) -> dict[str, Any]:
    """The telemetry fields of the step's row (summary.json `steps[]`)."""
    out: dict[str, Any] = {
        "gpu_util_pct": None, "gpu_util_max_pct": None, "sm_active": None, "vram_used_gb": None,
        "vram_total_gb": None, "gpu_temp_max_c": None, "gpu_power_w": None, "server_running": None,
        "server_waiting": None, "server_waiting_max": None, "kv_cache_usage_max": None,
        "client_cpu_max_pct": step.client_cpu_max_pct,
    }
    sel = step_rows(run, step)
    if sel is None or sel.empty:
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
    deferred = agg("server_deferred", "sum_mean")
    if deferred is not None:  # only servers that split their queue by reason (vLLM 0.32+) report it
        out["server_deferred"] = deferred
    out["kv_cache_usage_max"] = agg("kv_cache_usage", "max")
    cpu = agg("client_cpu_pct", "max")
    if cpu is not None:
        out["client_cpu_max_pct"] = max(cpu, step.client_cpu_max_pct or 0.0)
    return out
