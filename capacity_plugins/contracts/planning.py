"""The SLO, capacity-planning and verdict inputs, shared by the scenario file and `capacity analyze`.

The scenario embeds them as its `slo`, `capacity` and `verdict` sections; `capacity analyze` reads them back
from the results folder's resolved `scenario.yaml` and lets flags override them. They live among
the contracts because two stages read them and neither may import the other.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Strict(BaseModel):
    # Unknown keys are typos in a capacity plan; reject them rather than silently ignore.
    model_config = ConfigDict(extra="forbid", frozen=True)


class SLOConfig(_Strict):
    """Latency and error limits a load step must meet to count towards capacity.

    A step passes when, for every limit set (None = not judged), at least `attainment` of its
    measured requests are under the limit, and its error rate is at most `error_rate`.
    """

    ttft_p95_ms: float | None = Field(default=2000.0, gt=0)
    tpot_p95_ms: float | None = Field(default=100.0, gt=0)
    e2e_p95_ms: float | None = Field(default=None, gt=0)
    itl_p95_ms: float | None = Field(default=None, gt=0)
    # A reasoning model's (docs/metrics.md, "Reasoning"): time to first output token — the first
    # visible content after the thinking — and TPOT over the visible tokens only.
    first_visible_p95_ms: float | None = Field(default=None, gt=0)
    tpot_visible_p95_ms: float | None = Field(default=None, gt=0)
    attainment: float = Field(default=0.95, gt=0, le=1)
    error_rate: float = Field(default=0.01, ge=0, le=1)

    @model_serializer(mode="wrap")
    def _drop_unset_reasoning_limits(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Written only when set: summaries and scenario copies written before these keys existed
        # read and write back unchanged (tests/test_results_schema.py).
        data = handler(self)
        if isinstance(data, dict):
            for key in ("first_visible_p95_ms", "tpot_visible_p95_ms"):
                if key not in self.model_fields_set:
                    data.pop(key, None)
        return data


class CapacityConfig(_Strict):
    """The forecast and the fleet the plan is computed for."""

    peak_qps: float | None = Field(default=None, gt=0)
    peak_concurrency: float | None = Field(default=None, gt=0)
    safety_factor: float = Field(default=1.5, ge=1)
    redundancy: int = Field(default=1, ge=0)
    current_nodes: int | None = Field(default=None, ge=0)
    replicas_behind_url: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=1, ge=1)
    gpu_hour_usd: float | None = Field(default=None, ge=0)
    # Used only when no SLO limit is set: an SLO-measured capacity already has its headroom
    # (never stack a utilisation cap on it: docs/capacity.md).
    utilisation_cap: float = Field(default=0.7, gt=0, le=1)


class VerdictConfig(_Strict):
    """Every threshold a decision of the analysis uses, so each reason can name where it came from.

    Defaults are the method's (docs/capacity.md, "Verdict" and "Uncertainty"); the scenario's
    `verdict` section and `capacity analyze` flags override them.
    """

    # Confidence level of every interval the analysis reports (percentiles, throughput, capacity,
    # knee, compare). 0.95: one interval in twenty misses, the usual engineering compromise.
    confidence: float = Field(default=0.95, ge=0.5, lt=1)
    # Fewer valid steps than this do not measure a curve: the verdict is `observe`.
    min_valid_steps: int = Field(default=3, ge=1)
    # GPU utilisation at or above which the GPU counts as busy (the scale rule) ...
    gpu_busy_pct: float = Field(default=85.0, gt=0, le=100)
    # ... and below which it idles while latency misses the SLO (`dont_scale_yet`: not the GPU).
    gpu_idle_pct: float = Field(default=30.0, ge=0, le=100)
    # Below this the GPU is not saturated: a bottleneck hint points at feeding (batching, client).
    gpu_low_pct: float = Field(default=50.0, ge=0, le=100)
    # A GPU hotter than this (°C) is likely throttling.
    gpu_hot_c: float = Field(default=85.0, gt=0)
    # With an idle GPU, a server queue below this says requests are not waiting for the GPU.
    queue_idle_max: float = Field(default=5.0, ge=0)
    # Requests the server defers on average (vLLM: a LoRA adapter that cannot join a batch already at
    # --max-loras) from which the adapters, not the GPU, are the bottleneck. One: a sustained
    # deferral is the server's configuration at work, not noise.
    deferred_min: float = Field(default=1.0, gt=0)
    # KV-cache usage (0-1) at or above which memory, not compute, is full.
    kv_cache_full: float = Field(default=0.9, gt=0, le=1)
    # Latency judged at the forecast peak for `scale`: None = the SLO's own limits (the step at the
    # per-node peak misses the SLO); a number = that step's E2E P99 must exceed it, in ms.
    peak_e2e_p99_ms: float | None = Field(default=None, gt=0)
    # Forecast peak at or above this share of the current fleet's capacity: "start planning".
    trigger_share: float = Field(default=0.7, gt=0, le=1)
    # The plan refuses to size a fleet when the capacity interval's width exceeds this share of
    # the capacity (0.5: e.g. 10 rps known only within 7.5-12.5 rps).
    max_capacity_interval: float = Field(default=0.5, gt=0)
    # `capacity compare` of single runs: a change smaller than this share of the before value is
    # "within noise" whatever the within-run intervals say (they miss run-to-run variation).
    min_detectable_difference: float = Field(default=0.10, ge=0, lt=1)
    # Where TTFT goes (docs/capacity.md, "Where TTFT goes"): at the loaded step, a server queue
    # taking at least this share of TTFT dominates it — more replicas or batch slots shorten it,
    # faster GPUs mostly do not. 0.5: queueing is the larger part.
    queue_dominant_share: float = Field(default=0.5, gt=0, le=1)
    # Client TTFT mean − the server's own TTFT mean (network + client) above which the measuring
    # path is called out, in ms. On loopback it is ~0.5 ms, next to a real vLLM 2-3 ms; 10 ms is a
    # network hop or a busy client, not the server.
    client_remainder_max_ms: float = Field(default=10.0, gt=0)
