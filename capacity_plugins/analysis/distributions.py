"""Each step's measured TTFT and E2E as the report's box plots draw them: every value up to
BOX_SAMPLE, else BOX_SAMPLE of them drawn without replacement (a box plot of 20 k points is as exact
as one of 2 M). Gathered on the analysis's walk over the steps' records (table.py `step_rows`), so
that the report never reads the records again: `of_run(run)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from capacity_plugins.analysis.step_records import gathered

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData

BOX_SAMPLE = 20_000
COLUMNS = ("ttft_ms", "e2e_ms")


NAME = "distributions"


class Distributions:
    """A step consumer (step_records.py): each step of steps.json's samples into `out`."""

    def __init__(self, run: RunData) -> None:
        self._wanted = {st.index for st in run.steps}
        self.out: dict[int, dict[str, np.ndarray]] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        if index not in self._wanted:
            return
        m = records.loc[records["ok"] & ~records["warmup"] & (records["step"] >= 0), list(COLUMNS)]
        self.out[index] = {col: _sample(m[col].dropna().to_numpy()) for col in COLUMNS}


def _sample(v: np.ndarray) -> np.ndarray:
    if v.size > BOX_SAMPLE:
        v = np.random.default_rng(0).choice(v, BOX_SAMPLE, replace=False)
    return v


def of_run(run: RunData) -> dict[int, dict[str, np.ndarray]]:
    """Each step's samples: those the analysis's walk gathered, else from a walk now."""
    return gathered(run, NAME, lambda: Distributions(run)).out
