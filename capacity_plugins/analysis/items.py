"""Embeddings and rerank runs in items: the summary section `item_rates`.

A request of an embeddings or rerank dialect (contracts.dialects.ITEM_DIALECTS) carries
`request.batch_size` texts or documents and is answered whole, so the ordinary analysis already
measures it — per step the successful requests/s with its interval, the E2E percentiles, the SLO on
`e2e_p95_ms`, the knee, the capacity, the plan and the verdict, all in requests. This section states
them in the unit such a service is sized in: items/s (requests/s × batch_size, the same interval
scaled) and the server's input tokens/s, per step and for the capacity per node. The plan and the
verdict keep requests/s (`capacity.peak_qps` is a request rate), so their decision is the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from capacity_plugins.analysis.load import RunData
from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.contracts.dialects import ITEM_DIALECTS
from capacity_plugins.contracts.summary import Capacity, Interval, Items, ItemsStep, StepSummary


def _scaled(ci: Sequence[float | None] | None, k: int) -> Interval | None:
    return None if ci is None else [None if v is None else v * k for v in ci]


def _batch_size(run: RunData) -> int:
    value = run.settings.request.get("batch_size", 1)
    return value if isinstance(value, int) and value >= 1 else 1


class InputTokens:
    """A step consumer (step_records.py): each step's prompt tokens the server counted in its
    measured successful requests (their sum, and how many had a count), on the analysis's walk."""

    def __init__(self) -> None:
        self.tokens: dict[int, tuple[float, int]] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        ok = records[(records["step"] >= 0) & ~records["warmup"] & records["ok"]]
        tokens = ok["prompt_tokens"].dropna()
        self.tokens[index] = (float(tokens.sum()), len(tokens))


def items_section(run: RunData, rows: list[StepSummary]) -> Items:
    dialect = str(run.settings.target.get("dialect"))
    k = _batch_size(run)
    got = gathered(run, "item_rates", InputTokens).tokens
    steps = []
    for r in rows:
        total, counted = got.get(r.step, (0.0, 0))
        per_s = total / r.window_s if r.window_s and counted else None
        steps.append(ItemsStep(level=r.level, items_per_s=None if r.rps is None else r.rps * k,
                               items_per_s_ci=_scaled(r.rps_ci, k), input_tokens_per_s=per_s,
                               e2e_p50_ms=r.e2e_p50_ms, e2e_p95_ms=r.e2e_p95_ms, valid=bool(r.valid)))
    return Items(kind=ITEM_DIALECTS[dialect], dialect=dialect, batch_size=k, steps=steps)


@section("item_rates")
class ItemsSection(AnalysisSection):
    """Not a load kind: the dialect decides (any load may measure an embeddings service)."""

    def applies(self, run: RunData) -> bool:
        return run.settings.target.get("dialect") in ITEM_DIALECTS

    def step_records(self, run: RunData) -> InputTokens:
        return InputTokens()

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Items:
        return items_section(run, rows)

    def capacity(self, found: Items, cap: Capacity, run: RunData) -> Capacity:
        # The capacity stays in requests/s for the plan; the section states it in items/s.
        per = cap.per_node_rps
        found.per_node_items_per_s = None if per is None else per * found.batch_size
        found.per_node_items_per_s_ci = _scaled(cap.per_node_rps_ci, found.batch_size)
        found.line = _line(found, cap.method)
        return cap


def _line(found: Items, method: str | None) -> str:
    what = f"{found.kind} ({found.dialect}), {found.batch_size} item(s) per request"
    if found.per_node_items_per_s is None:
        return f"{what}: capacity in items/s unknown ({method or 'no valid step'})"
    at_least = "at least " if method == "never_failed" else ""
    return f"{what}: one node serves {at_least}{found.per_node_items_per_s:.4g} items/s within the SLO"
