"""The throughput estimator and the knee rule, calibrated against the simulator's known truth.

A seeded study (tests/helpers/virtual_sim.py): the simulator's own engine in virtual time, swept
closed-loop at ~200 requests per step and analysed as a real run's folder; the truth is the same
engine over long windows, and its knee is its slot count. `make bench` runs the full study
(bench/bench_calibration.py, figures in docs/benchmarks.md); this is its fast version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.analysis_data import make_results
from helpers.virtual_sim import LEVELS, calibration_study, true_throughput, virtual_sweep

from capacity_plugins import analyze
from capacity_plugins.analysis.knee import find_knee, requests_to_decide
from capacity_plugins.contracts.summary import StepSummary

# pure computation, no process and no timing: at the lowest CPU priority beside the measured
# sweeps, whose idle core it uses (tests/README.md)
pytestmark = pytest.mark.cpu


def test_eight_slots_at_200_requests_per_step_intervals_cover_and_the_knee_is_found(tmp_path: Path) -> None:
    study = calibration_study(tmp_path, runs=16, truth_s=600.0)
    # The truth itself: the engine saturates at its 8 slots.
    rps = study["truth_rps"]
    assert rps[LEVELS.index(8)] > 1.3 * rps[LEVELS.index(4)]
    assert rps[LEVELS.index(16)] < 1.05 * rps[LEVELS.index(8)]
    assert study["coverage"] >= 0.93, study
    assert study["capacity_coverage"] >= 0.93, study
    near = sum(v for k, v in study["knees"].items() if k in ("4", "8", "16"))
    assert near >= 0.9 * study["runs"], study
    # Sharp enough to tell a 10 % rise from flat: counting alone was ±11 % here.
    assert study["median_half_width"] < 0.06, study


def test_one_noisy_slot_never_shows_a_false_knee(tmp_path: Path) -> None:
    """One slot with service-time noise is saturated from the first level: the answer is that, or
    'too noisy to tell' with what would decide it — never a knee at a later level."""
    config = {"max_num_seqs": 1, "service_jitter_cv": 0.5}
    truth = true_throughput(1, seconds=300.0, **config)
    for seed in range(8):
        s = analyze(virtual_sweep(tmp_path / f"r{seed}", levels=LEVELS, rates=[truth] * len(LEVELS), seed=seed,
                                  **config), formats=["json"])
        knee = s.knee
        assert knee.value in (None, 1.0), knee.reason
        if knee.value is None:
            assert "to decide" in knee.reason and knee.to_decide.requests_per_step > 200, knee


def test_closed_loop_throughput_is_littles_law_and_counting_its_cross_check(tmp_path: Path) -> None:
    s = analyze(virtual_sweep(tmp_path / "v", levels=[2, 8], rates=[3.9, 9.2], seed=1), formats=["json"])
    for row in s.steps:
        assert row.rps_method == "littles_law" and row.rps_methods_agree is True
        e2e_s = row.e2e_mean_ms / 1000
        assert abs(row.rps - row.level / e2e_s) < 0.01 * row.rps
        lo, hi = row.rps_counted_ci
        assert lo <= row.rps <= hi
    # At saturation Little's interval is the sharper one (completions come in batches there).
    sat = s.steps[-1]
    assert sat.rps_ci[1] - sat.rps_ci[0] < sat.rps_counted_ci[1] - sat.rps_counted_ci[0]


def test_a_loop_that_is_not_closed_falls_back_to_counting(tmp_path: Path) -> None:
    """Users that idle between requests break Little's law (users / E2E is then far above the
    count): the count decides and the row says the two disagreed."""
    s = analyze(make_results(tmp_path / "m", levels=[1, 2, 4], rps=[10.0, 20.0, 40.0], e2e_p50_ms=500.0,
                             e2e_p99_ms=600.0), formats=["json"])
    for row in s.steps:
        assert row.rps_method == "counting" and row.rps_methods_agree is False
        assert row.rps == row.rps_counted


def test_an_undecided_knee_says_what_would_decide_it() -> None:
    rows = [StepSummary(level=lv, valid=True, rps=x, rps_ci=[x * 0.85, x * 1.15], requests=200, e2e_p95_ms=100.0 * lv)
            for lv, x in zip([1, 2, 4, 8], [10.0, 14.0, 15.0, 15.5], strict=True)]
    knee = find_knee(rows, "concurrency")
    assert knee.value is None
    decide = requests_to_decide(rows)
    assert decide is not None and knee.to_decide == decide
    # ±15 % → the 6.7 % a 10 % step needs: (15 / 6.73)² × 200 ≈ 994 requests.
    assert 950 <= decide.requests_per_step <= 1050
    assert f"{decide.requests_per_step:,} requests per step" in knee.reason
