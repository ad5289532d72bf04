"""PromQL query mode: pull normalised series from a Prometheus server after (or during) a run.

For teams that already scrape DCGM exporter and the inference server with Prometheus (like the
the usual capacity script): instead of scraping the endpoints ourselves, ask Prometheus for each
series over the run's time range. `queries` maps a normalised series name (docs/telemetry.md, e.g.
`gpu_util_pct`) to a PromQL expression that yields it in that series' unit; `DEFAULT_QUERIES`
covers DCGM exporter + vLLM. Rows have the telemetry_series.csv shape, so
`files.write_series_csv(rows, results / "telemetry_series.csv")` appends them.

A failed query (server down, bad PromQL) is logged and reported in `gaps`, never raised: the
other series still come back. Long ranges are split so no request exceeds Prometheus' 11 000
points per series limit.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from capacity_plugins.telemetry.maps import UNITS

logger = logging.getLogger(__name__)

MAX_POINTS = 11_000

# Raw DCGM names keep their gpu/Hostname labels, so host and device come out right with either
# label spelling; server series are summed per instance and model (over vLLM's `engine`).
DEFAULT_QUERIES: dict[str, str] = {
    "gpu_util_pct": "DCGM_FI_DEV_GPU_UTIL",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "vram_used_bytes": "DCGM_FI_DEV_FB_USED * 1048576",
    "gpu_temp_c": "DCGM_FI_DEV_GPU_TEMP",
    "gpu_power_w": "DCGM_FI_DEV_POWER_USAGE",
    "server_running": "sum by (instance, model_name) (vllm:num_requests_running)",
    "server_waiting": "sum by (instance, model_name) (vllm:num_requests_waiting)",
    "server_deferred": 'sum by (instance, model_name) (vllm:num_requests_waiting_by_reason{reason="deferred"})',
    "kv_cache_usage": "avg by (instance, model_name) (vllm:kv_cache_usage_perc)",
    "server_ttft_s": ("sum by (instance, model_name) (rate(vllm:time_to_first_token_seconds_sum[1m]))"
                      " / sum by (instance, model_name) (rate(vllm:time_to_first_token_seconds_count[1m]))"),
    "server_queue_s": ("sum by (instance, model_name) (rate(vllm:request_queue_time_seconds_sum[1m]))"
                       " / sum by (instance, model_name) (rate(vllm:request_queue_time_seconds_count[1m]))"),
}


def _host(labels: dict[str, str]) -> str:
    return labels.get("Hostname") or labels.get("hostname") or labels.get("instance") or "prometheus"


def _device(labels: dict[str, str]) -> str:
    return labels.get("gpu") or labels.get("model_name") or labels.get("model") or "all"


def _get(url: str, timeout_s: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        # Prometheus answers 400/422 with a JSON error body naming the PromQL problem.
        body = e.read()
        try:
            return json.loads(body)
        except ValueError:
            raise RuntimeError(f"HTTP {e.code} {e.reason}") from e
    try:
        return json.loads(body)
    except ValueError as e:
        raise RuntimeError("response is not JSON (is this a Prometheus server?)") from e


def query_range(base_url: str, queries: dict[str, str], start: float, end: float, step_s: float, *,
                step_of: Callable[[float], int | None] = lambda t: None, timeout_s: float = 30.0,
                gaps: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """telemetry_series rows for each query over [start, end] at step_s resolution."""
    if step_s <= 0 or end < start:
        raise ValueError(f"query_range: need step_s > 0 and end >= start (got {step_s}, {start}..{end})")
    api = base_url.rstrip("/") + "/api/v1/query_range"
    chunk_s = step_s * (MAX_POINTS - 1)
    rows: list[dict[str, Any]] = []
    for series, expr in queries.items():
        t0 = start
        while t0 <= end:
            t1 = min(end, t0 + chunk_s)
            params = urllib.parse.urlencode({"query": expr, "start": f"{t0:.3f}", "end": f"{t1:.3f}",
                                             "step": f"{step_s:g}"})
            try:
                answer = _get(f"{api}?{params}", timeout_s)
                if answer.get("status") != "success":
                    raise RuntimeError(f"{answer.get('errorType', 'error')}: {answer.get('error', answer)}")
                result = answer["data"]["result"]
            except (RuntimeError, OSError, KeyError, TypeError) as e:
                reason = f"query {series!r} failed: {e}"
                logger.warning("promql: %s", reason)
                if gaps is not None:
                    gaps.append({"url": base_url, "unix": time.time(), "reason": reason})
                break
            for item in result:
                labels = item.get("metric", {})
                for ts, value in item.get("values", []):
                    v = float(value)
                    if math.isnan(v) or math.isinf(v):
                        continue
                    unix = float(ts)
                    rows.append({"unix": unix, "step": step_of(unix), "host": _host(labels),
                                 "device": _device(labels), "series": series, "value": v,
                                 "unit": UNITS.get(series, "")})
            if t1 >= end:
                break
            t0 = t1 + step_s
    return rows
