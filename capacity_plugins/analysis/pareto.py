"""The Pareto view of a sweep: each step's output tokens/s per GPU against per user, the frontier
marked — summary.json's `pareto` (contracts/pareto.py), in every run with decoded output.

Per user is 1000 ÷ TPOT at the SLO's percentile (P95), so a point above the SLO's line
(1000 ÷ slo.tpot_p95_ms) is a step whose TPOT limit held; its interval is the TPOT quantile's,
inverted. Per GPU is the step's output tokens/s over the GPUs behind the URL, with the step's
throughput interval scaled onto it. The frontier is taken over valid steps only: an invalid step's
numbers decide nothing (analysis/validity.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.contracts.pareto import Pareto, ParetoPoint

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.contracts.document import Interval
    from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig
    from capacity_plugins.contracts.summary import StepSummary


@section("pareto")
class ParetoSection(AnalysisSection):
    """Any run with a step that decoded output (a TPOT and an output rate)."""

    def applies(self, run: RunData) -> bool:
        return bool(run.steps)

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Pareto | None:
        found = pareto(rows, run.slo, run.capacity)
        return found if found.points else None


def pareto(rows: list[StepSummary], slo: SLOConfig, cap: CapacityConfig) -> Pareto:
    gpus = cap.replicas_behind_url * cap.gpus_per_node
    points = [p for r in rows if (p := _point(r, gpus)) is not None]
    mark_frontier(points)
    bound = 1000.0 / slo.tpot_p95_ms if slo.tpot_p95_ms else None
    out = Pareto(points=points, gpus=gpus, slo_per_user_tok_s=bound)
    out.line = _line(out)
    return out


def _point(r: StepSummary, gpus: int) -> ParetoPoint | None:
    if not r.output_tokens_per_s or not r.tpot_p95_ms:
        return None
    x = r.output_tokens_per_s / gpus
    x_ci: Interval | None = None
    if r.rps and r.rps_ci and None not in r.rps_ci:
        x_ci = [x * float(c) / r.rps for c in r.rps_ci if c is not None]
    return ParetoPoint(step=r.step, level=r.level, per_gpu_tok_s=x, per_gpu_tok_s_ci=x_ci,
                       per_user_tok_s=1000.0 / r.tpot_p95_ms, per_user_tok_s_ci=_inverted(r.tpot_p95_ci_ms),
                       per_user_median_tok_s=1000.0 / r.tpot_p50_ms if r.tpot_p50_ms else None,
                       slo_pass=r.slo_pass, valid=r.valid)


def _inverted(ci: Interval | None) -> Interval | None:
    """A TPOT interval [lo, hi] ms as tokens/s [1000/hi, 1000/lo]; an unbounded end stays unbounded."""
    if not ci:
        return None
    lo, hi = ci
    return [1000.0 / hi if hi else 0.0, 1000.0 / lo if lo else None]


def mark_frontier(points: list[ParetoPoint]) -> None:
    """`frontier` on each valid point no other valid point dominates (at least as good on both axes,
    better on one). Also used across the entries of `capacity matrix`."""
    valid = [p for p in points if p.valid and p.per_gpu_tok_s is not None and p.per_user_tok_s is not None]
    chosen = {id(p) for p in valid}
    for p in points:
        p.frontier = id(p) in chosen and not any(
            q is not p and q.per_gpu_tok_s >= p.per_gpu_tok_s and q.per_user_tok_s >= p.per_user_tok_s  # type: ignore[operator]
            and (q.per_gpu_tok_s > p.per_gpu_tok_s or q.per_user_tok_s > p.per_user_tok_s)  # type: ignore[operator]
            for q in valid)


def _line(p: Pareto) -> str:
    front = [x for x in p.points if x.frontier]
    if not front:
        return "no valid step to draw a frontier from"
    inside = [x for x in front if x.slo_pass]
    best = max(inside, key=lambda x: x.per_gpu_tok_s or 0.0) if inside else None
    words = f"{len(front)} of {len(p.points)} steps on the frontier"
    if best is not None:
        words += (f"; within the SLO the most a GPU gives is {best.per_gpu_tok_s:.3g} output tok/s "
                  f"at level {best.level:.3g}, {best.per_user_tok_s:.3g} tok/s per user")
    else:
        words += "; no frontier step meets the SLO"
    return words
