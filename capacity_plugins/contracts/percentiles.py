"""The one percentile definition of the product: nearest rank.

For `n` sorted values the q-quantile is the k-th smallest, k = ceil(q·n) (at least 1): always a
value that was measured, never an interpolation between two requests. The live sketches
(`stats.py`), the steps accounting, the analysis tables and the tests all use it, so a P95 in the
web UI, in steps.json and in report.html means the same thing.
"""

from __future__ import annotations

import functools
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


# -- uncertainty: exact binomial machinery, pure Python -------------------------------------------
#
# The live capacity search (load side, no scipy there) and the analysis judge the same way, so the
# binomial quantile and the Clopper-Pearson interval are defined once, here. Exact: the binomial
# CDF is summed term by term — but only within 12 standard deviations of the mean, where all of
# the probability that can move a result lives (the mass outside is below 1e-30) — so a million
# values cost a few thousand terms, not a million. The terms come from the mode outwards by the
# ratio of neighbours (a multiply each instead of three lgamma and an exp: 3-4x faster, the same
# values to 1e-8 relative, as close as the lgamma form itself gets at a million values).

_SIGMAS = 12.0


def _binom_terms(n: int, p: float) -> tuple[int, list[float]]:
    """(first k, P(B = k) for k = first…) over the window that holds the binomial's mass."""
    if p <= 0.0:
        return 0, [1.0]
    if p >= 1.0:
        return n, [1.0]
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    lo = max(0, math.floor(mean - _SIGMAS * sd - 2))
    hi = min(n, math.ceil(mean + _SIGMAS * sd + 2))
    mode = min(hi, max(lo, math.floor((n + 1) * p)))
    top = math.exp(math.lgamma(n + 1) - math.lgamma(mode + 1) - math.lgamma(n - mode + 1)
                   + mode * math.log(p) + (n - mode) * math.log1p(-p))
    odds = p / (1.0 - p)
    above, t = [top], top
    for k in range(mode, hi):  # P(k+1) = P(k) · (n-k)/(k+1) · p/(1-p)
        t *= (n - k) / (k + 1) * odds
        above.append(t)
    below, t = [], top
    for k in range(mode, lo, -1):  # P(k-1) = P(k) · k/(n-k+1) · (1-p)/p
        t *= k / ((n - k + 1) * odds)
        below.append(t)
    below.reverse()
    return lo, below + above


def binom_ppf(prob: float, n: int, p: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= prob (scipy.stats.binom.ppf's definition)."""
    first, terms = _binom_terms(n, p)
    cdf = 0.0
    for i, t in enumerate(terms):
        cdf += t
        if cdf >= prob * (1.0 - 1e-12):
            return first + i
    return first + len(terms) - 1


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    first, terms = _binom_terms(n, p)
    if k < first:
        return 0.0
    return min(1.0, sum(terms[: k - first + 1]))


@functools.lru_cache(maxsize=4096)  # the same (n, q) comes back for every metric of a step
def rank_bounds(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """1-based ranks (r, s) with P(X(r) <= true q-quantile <= X(s)) >= confidence; None = no such rank.

    B ~ Binomial(n, q) counts values at or below the true quantile; X(r) exceeds it only when
    B < r, X(s) falls short only when B >= s. r = largest rank with P(B < r) <= alpha/2, s = smallest
    with P(B >= s) <= alpha/2. With too few values an end does not exist (the P99 of 18 requests has
    no upper bound).
    """
    if n < 1:
        return None, None
    half = (1.0 - confidence) / 2.0
    r = binom_ppf(half, n, q)
    s = binom_ppf(1.0 - half, n, q) + 1
    return (r if r >= 1 else None), (s if s <= n else None)


@functools.lru_cache(maxsize=4096)
def share_interval(k: int, n: int, confidence: float) -> tuple[float | None, float | None]:
    """Clopper-Pearson interval of a share k/n: exact, honest at 0 % and 100 % (None, None for n = 0)."""
    if n <= 0:
        return None, None
    half = (1.0 - confidence) / 2.0

    def solve(target: float, tail: str) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):  # bisection on p: 60 halvings is below double precision
            mid = (lo + hi) / 2.0
            mass = binom_cdf(k - 1, n, mid) if tail == "upper" else binom_cdf(k, n, mid)
            if tail == "upper":  # P(B >= k; p) = 1 - cdf(k-1) rises with p: find where it reaches target
                lo, hi = (mid, hi) if 1.0 - mass < target else (lo, mid)
            else:  # P(B <= k; p) falls with p
                lo, hi = (mid, hi) if mass > target else (lo, mid)
        return (lo + hi) / 2.0

    low = 0.0 if k <= 0 else solve(half, "upper")
    high = 1.0 if k >= n else solve(half, "lower")
    return low, high
