"""The interval methods: coverage checked by simulation, and exact formulas against scipy's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from capacity_plugins.analysis.intervals import (
    gain_class,
    poisson_rate_ci,
    quantiles_ci,
    rank_bounds,
    rate_ci,
    share_ci,
    t_interval,
)
from capacity_plugins.contracts.percentiles import nearest_rank


@pytest.mark.parametrize(("n", "q"), [(100, 0.5), (300, 0.95), (2000, 0.99)])
def test_percentile_interval_covers_the_true_quantile(n, q):
    rng = np.random.default_rng(int(n * q))
    truth = math.exp(stats.norm.ppf(q))  # log-normal(0, 1): skewed like latencies
    hits = 0
    trials = 600
    for _ in range(trials):
        v = rng.lognormal(0, 1, n)
        (point, lo, hi), = quantiles_ci(v, [q], 0.95)
        assert point == nearest_rank(np.sort(v), q)  # the product's one percentile definition
        assert lo is not None and hi is not None and lo <= point <= hi
        hits += lo <= truth <= hi
    # distribution-free and exact: at least 95 % (discreteness makes it a little more); a broken
    # rank formula misses by far more than the ±2 % this many trials allow
    assert 0.93 <= hits / trials <= 0.995


def test_tiny_samples_have_no_upper_bound_for_high_percentiles():
    r, s = rank_bounds(18, 0.99, 0.95)
    assert s is None and r == 17  # P99 of 18: at least the 17th value, no upper bound at all
    assert rank_bounds(18, 0.95, 0.95)[1] is None
    v = np.arange(1.0, 19.0)
    (p99, lo, hi), (p95, _, hi95) = quantiles_ci(v, [0.99, 0.95], 0.95)
    assert (p99, lo, hi, p95, hi95) == (18.0, 17.0, None, 18.0, None)
    # enough requests bound it, with the tightest ranks whose tails hold at most 2.5 % each
    r, s = rank_bounds(1000, 0.99, 0.95)
    b = stats.binom(1000, 0.99)
    assert b.cdf(r - 1) <= 0.025 < b.cdf(r) and b.sf(s - 1) <= 0.025 < b.sf(s - 2)


@pytest.mark.parametrize(("n", "q"), [(1000, 0.5), (64_000, 0.95), (2_000_000, 0.99), (5_000_000, 0.5)])
def test_rank_bounds_are_scipys_binomial_ranks_at_any_size(n, q):
    """The pure-Python binomial (the load side has no scipy) gives scipy's ranks, also for the
    millions of ITL gaps of a long run."""
    r, s = rank_bounds(n, q, 0.95)
    b = stats.binom(n, q)
    assert r == int(b.ppf(0.025)) and s == int(b.ppf(0.975)) + 1


def test_clustered_values_get_the_interval_of_their_requests():
    rng = np.random.default_rng(3)
    gaps = rng.lognormal(0, 0.5, 64 * 200)  # 200 requests × 64 ITL gaps
    (_, lo_n, hi_n), = quantiles_ci(gaps, [0.95], 0.95)
    (_, lo_r, hi_r), = quantiles_ci(gaps, [0.95], 0.95, n_eff=200)
    assert lo_r < lo_n and hi_r > hi_n  # as uncertain as 200 independent values, not 12 800


def test_share_interval_is_clopper_pearson():
    for k, n in [(0, 120), (114, 120), (120, 120), (3, 1000)]:
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert share_ci(k, n, 0.95) == pytest.approx((ref.low, ref.high))
    assert share_ci(0, 0, 0.95) == (None, None)


def test_throughput_interval_follows_the_real_variation():
    window, begin = 60.0, 0.0
    regular = np.linspace(0, window, 600, endpoint=False)  # a closed loop at saturation: even completions
    lo, hi, how = rate_ci(regular, begin, window, 600, 0.95)
    assert how == "batch_means" and hi - lo < 0.05
    rng = np.random.default_rng(5)
    bursty = np.sort(np.concatenate([rng.uniform(0, 6, 300), rng.uniform(30, 36, 300)]))  # two bursts
    lo_b, hi_b, _ = rate_ci(bursty, begin, window, 600, 0.95)
    assert hi_b - lo_b > 5  # far wider than counting noise would say (Poisson: about ±0.8)
    # Poisson sends: the interval covers the true rate about 95 % of the time
    hits = 0
    for _ in range(400):
        t = np.sort(rng.uniform(0, window, rng.poisson(10 * window)))
        lo, hi, _ = rate_ci(t, begin, window, t.size, 0.95)
        hits += lo <= 10 <= hi
    assert 0.90 <= hits / 400 <= 0.99
    # too few requests for ten batches: counting noise (Garwood)
    lo, hi, how = rate_ci(np.array([1.0, 2.0]), begin, window, 2, 0.95)
    assert how == "counting" and lo < 2 / window < hi


def test_gain_classes():
    assert gain_class(16.2, 0.6, 14.7, 0.6, 0.10) == "unclear"  # +10.2 %, but within noise
    assert gain_class(16.2, 0.0, 14.7, 0.0, 0.10) == "rise"  # the point rule
    assert gain_class(30.0, 0.6, 14.7, 0.6, 0.10) == "rise"
    assert gain_class(14.3, 0.3, 14.7, 0.3, 0.10) == "flat"


@pytest.mark.parametrize("n", [0, 1, 7, 250, 40_000])
def test_poisson_rate_interval_is_garwoods(n):
    """Garwood's exact interval: chi-square quantiles (scipy.stats) over twice the window."""
    lo, hi = poisson_rate_ci(n, 2.0, 0.95)
    ref_lo = 0.0 if n == 0 else stats.chi2.ppf(0.025, 2 * n) / 2 / 2.0
    assert lo == pytest.approx(ref_lo, rel=1e-9, abs=1e-12)
    assert hi == pytest.approx(stats.chi2.ppf(0.975, 2 * n + 2) / 2 / 2.0, rel=1e-9)


def test_t_interval_of_repeats():
    mean, sd, lo, hi = t_interval([10.0, 11.0, 12.0], 0.95)
    assert (mean, sd) == (11.0, 1.0)
    assert hi - mean == pytest.approx(stats.t.ppf(0.975, 2) / math.sqrt(3))
    assert t_interval([10.0], 0.95)[2] is None
