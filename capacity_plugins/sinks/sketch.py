"""LogHistogram: a mergeable quantile sketch with a bounded *relative* error (DDSketch-style).

Any quantile is within `rel_error` (default 0.5 %, guaranteed ≤ 1 %) of the exact nearest-rank
value (contracts/percentiles.py), clamped to the exact min / max seen; two sketches merge by
adding bucket counts, so workers' sketches combine on the master without losing accuracy.
Values at or below `min_value` (default 1e-3, i.e. 1 µs in ms) count in a zero bucket; negative
values are treated as 0; NaN is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from capacity_plugins.contracts.percentiles import nearest_rank_index


class LogHistogram:
    """Log-bucketed quantile sketch with bounded relative error.

    Bucket `i` holds values in `(gamma**(i-1), gamma**i]` with `gamma = (1+a)/(1-a)`, `a` =
    `rel_error`; its representative `2*gamma**i/(gamma+1)` is within `a` of every value in it.
    Memory grows with the log of the value range (≈ 700 buckets for 1 µs … 1 h at a = 0.5 %),
    not with the number of values.
    """

    __slots__ = ("rel_error", "min_value", "_gamma", "_inv_log_gamma", "_bins", "zero_count",
                 "count", "sum", "_min", "_max")

    def __init__(self, rel_error: float = 0.005, min_value: float = 1e-3) -> None:
        if not 0.0 < rel_error < 0.5:
            raise ValueError(f"rel_error must be in (0, 0.5), got {rel_error}")
        if min_value <= 0:
            raise ValueError(f"min_value must be > 0, got {min_value}")
        self.rel_error = float(rel_error)
        self.min_value = float(min_value)
        self._gamma = (1.0 + rel_error) / (1.0 - rel_error)
        self._inv_log_gamma = 1.0 / math.log(self._gamma)
        self._bins: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    # -- recording ------------------------------------------------------------------------

    def add(self, value: float, count: int = 1) -> None:
        if value != value or count <= 0:  # NaN, or nothing to add
            return
        if value > self.min_value:
            k = math.ceil(math.log(value) * self._inv_log_gamma)
            self._bins[k] = self._bins.get(k, 0) + count
        else:
            if value < 0.0:
                value = 0.0
            self.zero_count += count
        self.count += count
        self.sum += value * count
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value

    def add_many(self, values: Iterable[float]) -> None:
        """`add(v)` for each value; the loop is inlined because ITL lists are long."""
        # The gaps of chunks that came in one read are 0.0 (most of them when the client reads a
        # backlog): counted in one C call and left out of the loop. Adding 0.0 leaves `sum` as it is.
        same_read = values.count(0.0) if isinstance(values, list) else 0
        if same_read:
            values = filter(None, values)  # drops exactly the zeros counted (0.0 and -0.0); NaN stays
        bins = self._bins
        inv = self._inv_log_gamma
        floor = self.min_value
        log = math.log
        ceil = math.ceil
        n = 0
        total = 0.0
        lo = self._min
        hi = self._max
        zeros = 0
        for v in values:
            if v != v:
                continue
            if v > floor:
                k = ceil(log(v) * inv)
                bins[k] = bins.get(k, 0) + 1
            else:
                if v < 0.0:
                    v = 0.0
                zeros += 1
            n += 1
            total += v
            if v < lo:
                lo = v
            if v > hi:
                hi = v
        if same_read:
            zeros += same_read
            n += same_read
            lo = min(lo, 0.0)
            hi = max(hi, 0.0)
        self.zero_count += zeros
        self.count += n
        self.sum += total
        self._min = lo
        self._max = hi

    def merge(self, other: LogHistogram) -> None:
        if not math.isclose(other._gamma, self._gamma, rel_tol=1e-12) or other.min_value != self.min_value:
            raise ValueError(
                f"cannot merge histograms with different resolution "
                f"(rel_error {self.rel_error} vs {other.rel_error}, min_value {self.min_value} vs {other.min_value})"
            )
        bins = self._bins
        for k, c in other._bins.items():
            bins[k] = bins.get(k, 0) + c
        self.zero_count += other.zero_count
        self.count += other.count
        self.sum += other.sum
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def copy(self) -> LogHistogram:
        h = LogHistogram(self.rel_error, self.min_value)
        h.merge(self)
        return h

    def clear(self) -> None:
        self._bins.clear()
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    # -- reading --------------------------------------------------------------------------

    @property
    def min(self) -> float | None:
        return float(self._min) if self.count else None

    @property
    def max(self) -> float | None:
        return float(self._max) if self.count else None

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """Nearest-rank q-quantile (0 ≤ q ≤ 1) within `rel_error`; None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if not self.count:
            return None
        rank = nearest_rank_index(self.count, q) + 1
        if rank >= self.count:
            return float(self._max)
        if rank == 1:
            return float(self._min)
        seen = self.zero_count
        if seen >= rank:
            return 0.0
        for k in sorted(self._bins):
            seen += self._bins[k]
            if seen >= rank:
                value = 2.0 * self._gamma**k / (self._gamma + 1.0)
                # The exact value lies in this bucket and in [min, max]: clamping only helps.
                return min(max(value, self._min), self._max)
        return self._max  # pragma: no cover - counts are consistent

    def iter_buckets(self) -> Iterator[tuple[float, int]]:
        """(upper_bound, count) per non-empty bucket, ascending; the zero bucket's bound is min_value.

        A value v was counted in the first bucket whose upper bound is ≥ v, so the running sum
        up to a bucket is exactly the number of values ≤ that bound (what Prometheus `le` means).
        """
        if self.zero_count:
            yield self.min_value, self.zero_count
        for k in sorted(self._bins):
            yield self._gamma**k, self._bins[k]

    def cumulative_at(self, bound: float) -> int:
        """Number of values ≤ `bound`, at bucket resolution.

        Exact for bounds that are bucket upper bounds; for any other bound, the values of the one
        bucket that straddles it are left out (they lie within `rel_error` of `bound`).
        """
        total = 0
        for upper, c in self.iter_buckets():
            if upper > bound * (1.0 + 1e-12):
                break
            total += c
        return total

    # -- wire format ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Compact msgpack/JSON-safe form: sorted bucket keys delta-encoded, counts alongside."""
        keys = sorted(self._bins)
        deltas: list[int] = []
        prev = 0
        for k in keys:
            deltas.append(k - prev)
            prev = k
        return {
            "a": self.rel_error,
            "m": self.min_value,
            "k": deltas,
            "c": [self._bins[k] for k in keys],
            "z": self.zero_count,
            "n": self.count,
            "s": self.sum,
            "lo": self._min if self.count else None,
            "hi": self._max if self.count else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LogHistogram:
        h = cls(float(d["a"]), float(d["m"]))
        k = 0
        bins = h._bins
        deltas, counts = d["k"], d["c"]
        if len(deltas) != len(counts):
            raise ValueError("histogram dict: 'k' and 'c' lengths differ")
        for dk, c in zip(deltas, counts, strict=True):
            k += int(dk)
            bins[k] = int(c)
        h.zero_count = int(d["z"])
        h.count = int(d["n"])
        h.sum = float(d["s"])
        if h.count:
            h._min = float(d["lo"])
            h._max = float(d["hi"])
        return h

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, min={self.min}, max={self.max}, rel_error={self.rel_error})"
