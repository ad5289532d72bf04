"""The SLO and capacity-planning inputs, shared by the scenario file and `capacity analyze`.

The scenario embeds them as its `slo` and `capacity` sections; `capacity analyze` reads them back
from the results folder's resolved `scenario.yaml` and lets flags override them. They live among
the contracts because two stages read them and neither may import the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
    attainment: float = Field(default=0.95, gt=0, le=1)
    error_rate: float = Field(default=0.01, ge=0, le=1)


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
