"""The one percentile definition of the product: nearest rank.

For `n` sorted values the q-quantile is the k-th smallest, k = ceil(q·n) (at least 1): always a
value that was measured, never an interpolation between two requests. The live sketches
(`stats.py`), the steps accounting, the analysis tables and the tests all use it, so a P95 in the
web UI, in steps.json and in report.html means the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

# numpy's name for the same definition: np.percentile(v, q, method=NUMPY_METHOD).
NUMPY_METHOD: Final = "inverted_cdf"


def nearest_rank_index(n: int, q: float) -> int:
    """0-based index of the nearest-rank q-quantile among `n` sorted values (n ≥ 1)."""
    if n < 1:
        raise ValueError("no values")
    return min(max(1, math.ceil(q * n)), n) - 1


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """Exact nearest-rank q-quantile (0 < q ≤ 1) of already sorted values."""
    return sorted_values[nearest_rank_index(len(sorted_values), q)]


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank q-quantile of unsorted values; None when there are none."""
    if not values:
        return None
    return nearest_rank(sorted(values), q)
