"""Each step's ITL gaps, held in memory bounded by the steps rather than by the records.

A run's gaps outnumber its requests ~64 to 1 (a 256-token stream has 255 of them), so they are
what a long soak's analysis would run out of memory on: 10 M records carry 640 M gaps, 2.5 GB even
as float32. So gaps stay raw only while the run has few of them (`RAW_MAX`); past that each step
keeps its gaps as (distinct value, count) pairs. Nothing is rounded: the values are the float32 gaps
requests.arrow holds, and the records write gaps to 0.1 µs, so a step's distinct values are bounded
by its range of gaps (a few hundred thousand for gaps spread over 10–50 ms), not by its length.
The nearest-rank percentiles and their order-statistic intervals read either form exactly
(`analysis/intervals.py` `quantiles_ci(..., counts=)`): the same numbers as the sorted array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# float32: 7 significant digits, far below a microsecond for gaps in ms, at half the memory.
ITL_DTYPE = np.float32
# Gaps held raw (all steps together) before they are counted by value: 16 MB as float32. Counting
# is a sort, which numpy does for float32 faster than the partitions a percentile would need
# (16 M gaps: 0.16 s to count, 0.29 s for one partition at two ranks), so it costs little time.
RAW_MAX = 4_000_000


@dataclass(frozen=True)
class Gaps:
    """One step's gaps: raw values (`counts` None), or sorted distinct values with their counts."""

    values: np.ndarray
    counts: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.values.size) if self.counts is None else int(self.counts.sum())

    def share_at_most(self, limit: float) -> float:
        """The share of gaps ≤ limit (0 when there are none)."""
        n = self.size
        if n == 0:
            return 0.0
        if self.counts is None:
            return float(np.count_nonzero(self.values <= limit)) / n
        return float(self.counts[: np.searchsorted(self.values, limit, side="right")].sum()) / n


EMPTY = Gaps(np.empty(0, ITL_DTYPE))


class GapsByStep:
    """Collects each step's gaps batch by batch (`add`), then hands them on once (`finish`).

    While the run's gaps are few they stay raw; once more than RAW_MAX wait, every step's waiting
    gaps are counted into its (value, count) pairs — memory bounded by RAW_MAX and the steps'
    distinct values, whatever the number of records."""

    def __init__(self, indexes: list[int]) -> None:
        self._raw: dict[int, list[np.ndarray]] = {i: [] for i in indexes}
        self._waiting = 0
        self._counted: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def wants(self, index: int) -> bool:
        return index in self._raw

    def add(self, index: int, values: np.ndarray) -> None:
        """Take gaps the caller no longer touches (a copy the caller made, not a view of a file)."""
        if not values.size:
            return
        self._raw[index].append(values)
        self._waiting += int(values.size)
        if self._waiting > RAW_MAX:
            self._count_waiting()

    def _count_waiting(self) -> None:
        for index, raw in self._raw.items():
            if not raw:
                continue
            keys, counts = np.unique(np.concatenate(raw) if len(raw) > 1 else raw[0], return_counts=True)
            raw.clear()
            if index in self._counted:  # merge with what was counted before: a sort of distinct values only
                had_keys, had_counts = self._counted[index]
                keys, where = np.unique(np.concatenate([had_keys, keys]), return_inverse=True)
                counts = np.bincount(where, weights=np.concatenate([had_counts, counts]), minlength=keys.size)
            self._counted[index] = keys, counts.astype(np.int64)
        self._waiting = 0

    def finish(self) -> dict[int, Gaps]:
        if self._counted:  # a big run: every step counted, the last gaps too
            self._count_waiting()
            return {i: Gaps(*self._counted[i]) if i in self._counted else EMPTY for i in self._raw}
        out = {i: EMPTY if not raw else Gaps(raw[0] if len(raw) == 1 else np.concatenate(raw))
               for i, raw in self._raw.items()}
        self._raw = {}
        return out


def by_step(values: np.ndarray, steps: np.ndarray, indexes: list[int]) -> dict[int, Gaps]:
    """Split flat gaps by their step tag (-1: not measured) into each step's `Gaps`."""
    out: dict[int, Gaps] = {}
    if values.size == 0:
        return out
    values = np.asarray(values, dtype=ITL_DTYPE)
    if bool((steps < 0).any()):  # failed, warm-up or unstepped requests' gaps out first
        keep = steps >= 0
        values, steps = values[keep], steps[keep]
    # Records are written step after step (the shape drains between steps), so the gaps are
    # usually already grouped: then each step is a slice, found by binary search.
    if steps.size and bool(np.all(steps[1:] >= steps[:-1])):
        keys = np.array(indexes, dtype=steps.dtype)  # same dtype: no 64 M-element cast
        los, his = np.searchsorted(steps, keys, "left"), np.searchsorted(steps, keys, "right")
        for index, lo, hi in zip(indexes, los, his, strict=True):
            if hi > lo:
                out[index] = Gaps(values[lo:hi])
        return out
    for index in indexes:  # one boolean pass per step: cheaper than sorting tens of millions of gaps
        sel = values[steps == index]
        if sel.size:
            out[index] = Gaps(sel)
    return out
