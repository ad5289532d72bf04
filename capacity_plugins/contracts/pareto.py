"""summary.json's `pareto`: each load step as a point of interactivity against throughput per GPU.

The trade a serving configuration makes (vLLM `bench` and AIPerf draw it): more concurrent users
give more output tokens per second per GPU and fewer per user. A step on the frontier is one no
other step beats on both; the SLO's region is where the per-user rate meets the TPOT limit.
Written by analysis/pareto.py; the report draws it (outputs/pareto_text.py), and `capacity matrix`
draws every entry's points on one plot.
"""

from __future__ import annotations

from pydantic import Field

from capacity_plugins.contracts.document import Interval, Section


class ParetoPoint(Section):
    """One load step."""

    step: int = 0
    level: float = 0.0
    per_gpu_tok_s: float | None = None
    """Output tokens per second per GPU: the step's output tokens/s ÷ (replicas behind the URL × GPUs per node)."""
    per_gpu_tok_s_ci: Interval | None = None
    """The step's throughput interval, scaled."""
    per_user_tok_s: float | None = None
    """Output tokens per second one user gets, at the SLO's percentile: 1000 ÷ the step's TPOT P95 —
    95 % of requests decoded at least this fast."""
    per_user_tok_s_ci: Interval | None = None
    per_user_median_tok_s: float | None = None
    """1000 ÷ TPOT P50: the median request's decode speed."""
    slo_pass: bool | None = None
    valid: bool | None = None
    frontier: bool = False
    """No other valid step has both more tokens/s per GPU and more per user."""


class Pareto(Section):
    """Interactivity against throughput, per step (docs/metrics.md, "The Pareto view")."""

    points: list[ParetoPoint] = Field(default_factory=list)
    gpus: int = 1
    """GPUs the throughput is divided over: replicas behind the URL × GPUs per node."""
    slo_per_user_tok_s: float | None = None
    """The SLO's region: a per-user rate at or above 1000 ÷ slo.tpot_p95_ms meets the TPOT limit; null
    without a TPOT limit."""
    line: str = ""
