"""The throughput intervals and the knee rule against the simulator's known truth: the full study.

tests/test_calibration.py runs a fast version; this is the one whose figures docs/benchmarks.md
and docs/capacity.md ("Calibration") quote. The simulator's own engine runs in virtual time
(tests/helpers/virtual_sim.py): seeded closed-loop sweeps 1–32 users at ~200 requests per step,
each analysed as a real run's folder, judged against the same engine over 3 000-s windows.

Goals (issue 25): the stated 95 % throughput intervals hold the truth in ≥ 93 % of steps; the
knee is found within one level of the truth (the slot count) in ≥ 90 % of runs; a one-slot server
with service-time noise never shows a knee after its first level.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.virtual_sim import LEVELS, calibration_study

RUNS = 200
NOISY_RUNS = 100


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        s = calibration_study(Path(tmp) / "eight", runs=RUNS)
        near = sum(v for k, v in s["knees"].items() if k in ("4", "8", "16"))
        print(f"8 slots, {RUNS} runs, ~{s['requests_per_step']} requests per step ({time.perf_counter() - t0:.0f} s)")
        print(f"  truth rps by level {dict(zip(LEVELS, (round(x, 3) for x in s['truth_rps']), strict=True))}, "
              f"capacity {s['true_capacity']:.3f}")
        print(f"  throughput interval coverage {s['coverage']:.1%} (goal ≥ 93 %); by level "
              + ", ".join(f"{k}: {v:.0%}" for k, v in s["coverage_by_level"].items()))
        print(f"  counted interval coverage {s['counted_coverage']:.1%}; median half-width {s['median_half_width']:.1%}")
        print(f"  capacity interval coverage {s['capacity_coverage']:.1%} (goal ≥ 93 %)")
        print(f"  knee found {s['knees']}: within one level of 8 in {near / RUNS:.1%} (goal ≥ 90 %)")
        t0 = time.perf_counter()
        n = calibration_study(Path(tmp) / "one", runs=NOISY_RUNS, max_num_seqs=1, service_jitter_cv=0.5)
        false = sum(v for k, v in n["knees"].items() if k not in ("none", "1"))
        print(f"1 slot, service-time CV 0.5, {NOISY_RUNS} runs ({time.perf_counter() - t0:.0f} s)")
        print(f"  throughput interval coverage {n['coverage']:.1%}; knee {n['knees']}: "
              f"false knees (after level 1) {false} (goal 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
