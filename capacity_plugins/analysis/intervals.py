"""Uncertainty of the analysis's numbers: distribution-free where it can be, exact, and cheap.

| quantity | interval | why this one |
|---|---|---|
| a percentile of n values | order statistics [X(r), X(s)], r and s from Binomial(n, q) | exact for any continuous latency distribution (no normal or log-normal assumption); costs one partition at two more ranks, so a million values take milliseconds (no bootstrap). With too few values an end does not exist: the P99 of 18 requests has no upper bound (None) |
| a share (SLO attainment, error rate) | Clopper-Pearson | the exact binomial interval; honest at 0 % and 100 % where the normal approximation collapses |
| a closed-loop step's throughput (rps) | Little's law: users ÷ mean cycle time (E2E of every measured attempt; the closed loop has no think time), its interval from batch means of the E2E (10 sub-windows by send time, Student t with 9 df); used when the counted rate agrees with it | with N users always either waiting for an answer or sending the next request, throughput is exactly N / mean cycle. A mean of ~200 E2E values is known to a few percent, while counting ~200 completions in ten sub-windows is ±11 %: counting alone needs ~1 500 requests per step to tell a 10 % rise from flat. Batch means, not the values' own spread: requests in flight together share the queue, so their E2E values are not independent |
| a step's throughput (rps), counted (open loop; closed loop's cross-check) | batch means: the window cut into 10 sub-windows, successful sends counted in each, Student t with 9 df on their rates; below 50 requests, counting noise (Garwood's Poisson interval) | completions are not Poisson: a closed loop at saturation completes far more regularly (a fixed-length batch finishes every cycle), a bursty server far less. Batch means measures the variation the step really had (bursts, drift, a slow minute) instead of assuming one; t with 9 df pays for estimating it from ten numbers |
| clustered values (ITL gaps) | the percentile ranks computed for the number of *requests*, then mapped to gap ranks | the gaps of one request share its batch and its prompt: they are not independent draws |
| a mean over repeats | Student t on the repeats' values | run-to-run spread, the variation a comparison of runs must beat |
| agentic sessions per minute (a closed loop of sessions) | Little's law: users ÷ mean session time, the mean's interval Student t over the sessions completed (≥ SESSIONS_MIN); fewer: Garwood's count | each user walks one session after another with no pause, so sessions complete at users / mean session time; a step completes a few dozen sessions, and counting them in the window is ±30 % where the mean of their times is known to a few percent. Coverage by simulation in tests/test_agentic.py |

Every interval is two-sided at the `verdict.confidence` level (default 0.95). Within-run intervals
describe *this* run: a second run of the same system varies more (warm caches, placement, other
tenants), which is why `capacity compare` of single runs adds a minimum detectable difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

# scipy.special, not scipy.stats: the same inverse CDFs without scipy.stats' ~0.6 s import, a
# tenth of analysing a million records (bench_analysis.py).
from scipy.special import gammaincinv, stdtrit

from capacity_plugins.contracts.percentiles import nearest_rank_index, rank_bounds, share_interval

# Sub-windows for batch means: 10 keeps 9 degrees of freedom (t = 2.26 at 95 %) while each batch
# still holds a tenth of the step, long enough to span several request lifetimes.
BATCHES = 10
# Below this many requests a step's batches hold one or two requests each: counting noise only.
BATCH_MIN_REQUESTS = 50

# Fewer completed sessions than this: their mean time's t interval is too wide to beat counting.
SESSIONS_MIN = 5

Interval = tuple[float | None, float | None]
Gain = Literal["rise", "flat", "unclear"]


def _ranks_for(n: int, q: float, confidence: float, n_eff: int | None) -> tuple[int, int | None, int | None]:
    """0-based (point, low, high) indices among n sorted values; n_eff < n = clustered values."""
    point = nearest_rank_index(n, q)
    if n_eff is None or n_eff >= n:
        r, s = rank_bounds(n, q, confidence)
        return point, (r - 1 if r else None), (s - 1 if s else None)
    # Clustered: the ranks an independent sample of n_eff would allow, as shares, mapped to n values.
    r, s = rank_bounds(max(n_eff, 1), q, confidence)
    lo = nearest_rank_index(n, r / n_eff) if r else None
    hi = nearest_rank_index(n, s / n_eff) if s else None
    return point, lo, hi


def quantiles_ci(values: np.ndarray, qs: Sequence[float], confidence: float, n_eff: int | None = None,
                 keep_inf: bool = False, counts: np.ndarray | None = None,
                 ) -> list[tuple[float | None, float | None, float | None]]:
    """(nearest-rank point, low, high) per q, from one partition of the values.

    Non-finite values are left out (a percentile of what was measured) unless `keep_inf`: then +inf
    stands for a request that never produced the value and counts as the slowest (the SLO view).
    None where there are no values, or an interval end the sample size cannot support.
    With `counts`, `values` are sorted distinct values and `counts` how often each occurred (a big
    step's ITL gaps, analysis/gaps.py): the same order statistics, read from the running counts.
    """
    if counts is not None:
        return _counted_quantiles(values, counts, qs, confidence, n_eff, keep_inf)
    if keep_inf:
        v = values[~np.isnan(values)] if bool(np.isnan(values).any()) else values
    else:
        v = values if values.size == 0 or bool(np.isfinite(values).all()) else values[np.isfinite(values)]
    n = int(v.size)
    if n == 0:
        return [(None, None, None) for _ in qs]
    ranks = [_ranks_for(n, q, confidence, n_eff) for q in qs]
    kth = sorted({i for rk in ranks for i in rk if i is not None})
    part = np.partition(v, kth)
    return [tuple(None if i is None else float(part[i]) for i in rk) for rk in ranks]  # type: ignore[misc]


def _counted_quantiles(values: np.ndarray, counts: np.ndarray, qs: Sequence[float], confidence: float,
                       n_eff: int | None, keep_inf: bool) -> list[tuple[float | None, float | None, float | None]]:
    keep = ~np.isnan(values) if keep_inf else np.isfinite(values)
    if not bool(keep.all()):
        values, counts = values[keep], counts[keep]
    below = np.cumsum(counts)  # below[j]: how many values are <= values[j]
    n = int(below[-1]) if below.size else 0
    if n == 0:
        return [(None, None, None) for _ in qs]
    ranks = [_ranks_for(n, q, confidence, n_eff) for q in qs]

    def at(i: int | None) -> float | None:  # the i-th smallest (0-based): the first value with more than i at or below it
        return None if i is None else float(values[int(np.searchsorted(below, i, side="right"))])

    return [(at(p), at(lo), at(hi)) for p, lo, hi in ranks]


def t_quantile(p: float, dof: int) -> float:
    """Student's t p-quantile with `dof` degrees of freedom (scipy.stats.t.ppf)."""
    return float(stdtrit(dof, p))


def share_ci(k: int, n: int, confidence: float) -> Interval:
    """Clopper-Pearson interval of a share k/n (None, None when n = 0): contracts/percentiles.py."""
    return share_interval(k, n, confidence)


def poisson_rate_ci(n: int, window_s: float, confidence: float) -> tuple[float, float]:
    """Garwood's exact interval of a Poisson count n over window_s, as a rate."""
    a = 1.0 - confidence
    # chi2.ppf(p, 2k) / 2 is the inverse regularised lower gamma function of k at p
    lo = 0.0 if n <= 0 else float(gammaincinv(n, a / 2))
    hi = float(gammaincinv(n + 1, 1 - a / 2))
    return lo / window_s, hi / window_s


def rate_ci(times_unix: np.ndarray, begin_unix: float | None, window_s: float | None, n: int,
            confidence: float) -> tuple[float | None, float | None, str | None]:
    """(low, high, method) of a step's throughput n / window_s (see the module table)."""
    if not window_s or window_s <= 0:
        return None, None, None
    point = n / window_s
    if n < BATCH_MIN_REQUESTS or begin_unix is None:
        lo, hi = poisson_rate_ci(n, window_s, confidence)
        return lo, hi, "counting"
    t = times_unix[np.isfinite(times_unix)]
    counts, _ = np.histogram(t, bins=BATCHES, range=(begin_unix, begin_unix + window_s))
    rates = counts / (window_s / BATCHES)
    half = t_quantile(1 - (1 - confidence) / 2, BATCHES - 1) * float(np.std(rates, ddof=1)) / math.sqrt(BATCHES)
    return max(point - half, 0.0), point + half, "batch_means"


def littles_rate(users: float, e2e_ms: np.ndarray, service_ms: np.ndarray, sent_unix: np.ndarray,
                 begin_unix: float | None, window_s: float | None, ok_share: float, confidence: float,
                 ) -> tuple[float, float, float] | None:
    """(point, low, high) of a closed loop's successful requests per second by Little's law.

    `users` closed-loop users with no think time are each always inside one request, so attempts
    complete at users / mean E2E per second, and `ok_share` of them succeed. The mean E2E's
    interval is the wider of two views of its noise:
    - the users' side: batch means (the window cut into BATCHES sub-windows by send time, Student
      t on the sub-windows' mean E2E) — concurrent requests share a queue, so their own spread
      would understate it;
    - the server's side: once the server is the bottleneck, how many requests it finishes in the
      window is set by its service times (`service_ms`: E2E − TTFT, the generation each request
      held a slot for): n completions vary by CV(service) / √n (the renewal count's central limit).
      Every request of one cycle then waits behind the same batch, so their E2E rise and fall
      together across sub-windows and batch means alone would miss this (the calibration study in
      docs/benchmarks.md: 79 % coverage at 32 users on 8 slots with batch means only, 98 % with both).
    None below BATCH_MIN_REQUESTS attempts, with no window, without service times (no streaming:
    no TTFT to split E2E at), or with fewer than half the sub-windows holding a request: the count
    decides then.
    """
    keep = np.isfinite(e2e_ms) & np.isfinite(sent_unix)
    e2e, sent = e2e_ms[keep], sent_unix[keep]
    service = service_ms[keep]
    service = service[np.isfinite(service)]
    if users <= 0 or not window_s or begin_unix is None or e2e.size < BATCH_MIN_REQUESTS or service.size < 2:
        return None
    mean_s = float(e2e.mean()) / 1000.0
    if mean_s <= 0:
        return None
    slot = np.clip(((sent - begin_unix) / (window_s / BATCHES)).astype(int), 0, BATCHES - 1)
    counts = np.bincount(slot, minlength=BATCHES)
    sums = np.bincount(slot, weights=e2e, minlength=BATCHES)
    full = counts > 0
    k = int(full.sum())
    if k < BATCHES // 2:
        return None
    t = t_quantile(1 - (1 - confidence) / 2, k - 1)
    users_side = float(np.std(sums[full] / counts[full] / 1000.0, ddof=1)) / math.sqrt(k)
    service_mean = float(service.mean())
    service_cv = float(service.std(ddof=1)) / service_mean if service_mean > 0 else 0.0
    server_side = mean_s * service_cv / math.sqrt(e2e.size)
    half = t * max(users_side, server_side)
    point = users / mean_s * ok_share
    lo = users / (mean_s + half) * ok_share
    hi = users / (mean_s - half) * ok_share if half < mean_s else math.inf
    return point, lo, hi


def sessions_rate(users: float, session_s: Sequence[float], window_s: float | None,
                  confidence: float) -> tuple[float, float, float, str] | None:
    """(point, low, high, method) of a closed loop's completed sessions per second: `users` each
    walking one session after another; `session_s` the completion times of the sessions that ended
    in the window (module table). None with no window and too few sessions to use Little's law."""
    times = np.asarray([t for t in session_s if t is not None and math.isfinite(t) and t > 0], float)
    if users > 0 and times.size >= SESSIONS_MIN:
        mean, _sd, lo, hi = t_interval(times.tolist(), confidence)
        assert mean is not None and lo is not None and hi is not None  # two or more values
        return users / mean, users / hi, (users / lo if lo > 0 else math.inf), "littles_law"
    if not window_s or window_s <= 0:
        return None
    low, high = poisson_rate_ci(len(session_s), window_s, confidence)
    return len(session_s) / window_s, low, high, "counting"


def gain_class(x: float, x_half: float, base: float, base_half: float, gain: float) -> Gain:
    """Did x rise at least `gain` (e.g. 10 %) over base, beyond the noise of both?

    rise: x − (1+gain)·base exceeds the half-width of that difference; flat: it falls short of
    minus that half-width; unclear: the noise cannot tell. Half-widths combine as independent
    errors (root of the sum of squares). With no noise given this is the plain point comparison.
    """
    d = x - (1.0 + gain) * base
    half = math.hypot(x_half, (1.0 + gain) * base_half)
    if d >= half:
        return "rise"
    if d < -half:
        return "flat"
    return "unclear"


def half_width(point: float | None, lo: float | None, hi: float | None) -> float:
    """The larger distance from the point to an interval end (inf when an end is unknown)."""
    if point is None:
        return math.inf
    if lo is None or hi is None:
        return math.inf
    return max(point - lo, hi - point, 0.0)


def t_interval(values: Sequence[float], confidence: float) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean, sd, low, high) of repeated measurements (sd, low, high None with fewer than 2)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if v.size == 0:
        return None, None, None, None
    mean = float(v.mean())
    if v.size < 2:
        return mean, None, None, None
    sd = float(v.std(ddof=1))
    half = t_quantile(1 - (1 - confidence) / 2, v.size - 1) * sd / math.sqrt(v.size)
    return mean, sd, mean - half, mean + half
