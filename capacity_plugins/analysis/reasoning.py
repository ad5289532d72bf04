"""A reasoning model's answers, step by step: how much of each was thinking, when the first visible
output came, and what a visible token costs — summary.json's `reasoning` (contracts/reasoning.py).

The section applies when any record counted reasoning tokens (the server's usage details, or the
reasoning channel's chunks: contracts/records.py). The SLO keys of a reasoning model
(`first_visible_p95_ms`, `tpot_visible_p95_ms`) are judged with the others in the step table
(analysis/table.py, contracts/slo.py); this section only gives the account the reader needs to
trust them: TTFT there is the first *thinking* token, the reader waits for the first visible one.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from capacity_plugins.analysis.intervals import quantiles_ci, t_interval
from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.analysis.table import pcts_with_ci, step_window
from capacity_plugins.contracts.reasoning import Reasoning, ReasoningStep

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.contracts.summary import Capacity, StepSummary


@section("reasoning")
class ReasoningSection(AnalysisSection):
    """Any run whose answers had reasoning tokens."""

    def applies(self, run: RunData) -> bool:
        return run.records.has("reasoning_tokens")

    def step_records(self, run: RunData) -> ReasoningRecords:
        return ReasoningRecords(run)

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Reasoning:
        return reasoning_summary(run, rows)

    def capacity(self, found: Reasoning, cap: Capacity, run: RunData) -> Capacity:
        # The capacity is final here (after every section's own): price the visible tokens at it.
        price_visible(found, cap, run)
        return cap


class ReasoningRecords:
    """A step consumer (step_records.py): each step's account from its measured successful
    records, and the reasoning token sources over every record, on the analysis's walk."""

    def __init__(self, run: RunData) -> None:
        self._steps = {st.index: st for st in run.steps}
        self._conf = run.verdict.confidence
        self.steps: dict[int, ReasoningStep] = {}
        self.sources: Counter[str] = Counter()

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        self.sources.update({str(k): int(v) for k, v in records["reasoning_tokens_source"].dropna().value_counts().items()})
        st = self._steps.get(index)
        mine = records[(records["step"] >= 0) & ~records["warmup"] & records["ok"]]
        if st is None or not len(mine):
            return
        measured = records[(records["step"] >= 0) & ~records["warmup"] & (records["error_kind"] != "cancelled")]
        self.steps[index] = _step(st.index, st.level, step_window(st, measured["sent_unix"].to_numpy(float)),
                                  mine, self._conf)


def reasoning_summary(run: RunData, rows: list[StepSummary]) -> Reasoning:
    got = gathered(run, "reasoning", lambda: ReasoningRecords(run))
    steps = []
    for row in rows:
        one = got.steps.get(row.step)
        if one is None:
            continue
        one.ttft_p50_ms = row.ttft_p50_ms
        steps.append(one)
    out = Reasoning(steps=steps, sources=dict(got.sources.most_common()))
    out.line = _line(out)
    return out


def _step(index: int, level: float, window: float | None, mine: pd.DataFrame, conf: float) -> ReasoningStep:
    reasoning = mine["reasoning_tokens"].to_numpy(float)
    visible = mine["visible_output_tokens"].to_numpy(float)
    known = ~np.isnan(reasoning) & ~np.isnan(visible)
    total = reasoning[known] + visible[known]
    shares = np.divide(reasoning[known], total, out=np.full(total.shape, np.nan), where=total > 0)
    share, _sd, lo, hi = t_interval(list(shares), conf)
    first_visible = mine["first_visible_ms"].to_numpy(float)
    thinking = first_visible - mine["ttft_ms"].to_numpy(float)
    (think, tlo, thi), = quantiles_ci(thinking[~np.isnan(thinking)], [0.5], conf)
    fv = pcts_with_ci(first_visible, "first_visible", conf)
    pace = mine["tpot_visible_ms"].to_numpy(float)
    pace = pace[~np.isnan(pace)]
    (p50, _l, _h), (p95, _l2, _h2) = quantiles_ci(pace, [0.5, 0.95], conf)
    return ReasoningStep(
        step=index, level=level, requests=len(mine), reasoning_requests=int((~np.isnan(reasoning)).sum()),
        reasoning_tokens_mean=_mean(reasoning), visible_output_tokens_mean=_mean(visible),
        thinking_share=share, thinking_share_ci=None if lo is None else [lo, hi],
        first_visible_p50_ms=fv["first_visible_p50_ms"], first_visible_p50_ci_ms=fv["first_visible_p50_ci_ms"],
        first_visible_p95_ms=fv["first_visible_p95_ms"], first_visible_p95_ci_ms=fv["first_visible_p95_ci_ms"],
        thinking_p50_ms=think, thinking_p50_ci_ms=None if think is None else [tlo, thi],
        tpot_visible_p50_ms=p50, tpot_visible_p95_ms=p95,
        visible_output_tokens_per_s=float(np.nansum(visible)) / window if window else None,
    )


def _mean(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def price_visible(found: Reasoning, cap: Capacity, run: RunData) -> None:
    """Cost per million visible tokens at one node's capacity under the SLO (plan.make_cost's basis):
    the node's cost per second ÷ (requests/s × visible tokens per request) — reasoning tokens are
    paid for (GPU time) but not shown."""
    usd = run.capacity.gpu_hour_usd
    if usd is None:
        found.cost_basis = "no gpu_hour_usd given"
        return
    per_node = cap.per_node_rps
    at = cap.last_pass_level
    ref = next((s for s in found.steps if s.level == at), None)
    if not per_node or ref is None or not ref.visible_output_tokens_mean:
        found.cost_basis = "no capacity under the SLO to price at"
        return
    node_usd_per_s = usd * run.capacity.gpus_per_node / 3600.0
    found.per_1m_visible_tokens_usd = node_usd_per_s / (per_node * ref.visible_output_tokens_mean) * 1e6
    found.cost_basis = (f"one node at its capacity under the SLO ({per_node:.3g} rps), "
                        f"{ref.visible_output_tokens_mean:.3g} visible tokens per answer at level {ref.level:.3g}")


def _line(r: Reasoning) -> str:
    if not r.steps:
        return "answers had reasoning tokens, but no measured step had a successful one"
    s = max(r.steps, key=lambda x: x.level)
    share = "?" if s.thinking_share is None else f"{s.thinking_share:.0%}"
    words = (f"{share} of each answer was thinking at level {s.level:.3g} "
             f"({_n(s.reasoning_tokens_mean)} reasoning, {_n(s.visible_output_tokens_mean)} visible tokens per answer)")
    if s.first_visible_p95_ms is not None:
        words += (f"; the first visible output came at P95 {s.first_visible_p95_ms:.0f} ms, "
                  f"the first token of any kind at P50 {_n(s.ttft_p50_ms)} ms")
    return words


def _n(v: float | None) -> str:
    return "?" if v is None else f"{v:.3g}"
