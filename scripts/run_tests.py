"""The test suite in two phases, one result: what `make test` and `make test-fast` run.

1. parallel: every test not marked `alone`, on N pytest-xdist workers (most of the suite waits on
   the processes it starts: real Locust runs, simulators, servers), whole modules first, longest
   first (tests/durations.json);
2. alone: the tests marked `alone` (they read CPU time, scheduling lag or a calibration that other
   tests' load would disturb), one at a time, with nothing else of the suite running.

Then one summary over both: the counts, every failure, the 25 slowest tests (setup + call +
teardown). The exit status is non-zero when either phase failed. tests/README.md says how to mark
a test `alone`.

    python scripts/run_tests.py                      # everything (make test)
    python scripts/run_tests.py --fast               # without slow/browser/prometheus (make test-fast)
    python scripts/run_tests.py -n 2 -- -x tests/test_users.py   # workers; the rest goes to pytest
    python scripts/run_tests.py --store-durations    # rewrite tests/durations.json from this run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
FAST = "not slow and not browser and not prometheus"
SLOWEST = 25
# pytest's "no tests were collected": a phase with nothing to run (no `alone` test under -k ...).
NO_TESTS = 5


def default_workers() -> int:
    """Twice the cores, 2 to 8: the parallel phase mostly waits on processes it started, and each of
    those gets CPU when a worker's test is sleeping through a step. TEST_WORKERS overrides."""
    if os.environ.get("TEST_WORKERS"):
        return max(1, int(os.environ["TEST_WORKERS"]))
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


@dataclass
class Outcome:
    counts: dict[str, int] = field(default_factory=lambda: {"passed": 0, "failed": 0, "error": 0, "skipped": 0})
    failures: list[str] = field(default_factory=list)
    times: list[tuple[float, str]] = field(default_factory=list)

    def read(self, junit: Path) -> None:
        if not junit.exists():
            return
        for case in ET.parse(junit).getroot().iter("testcase"):
            path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            nodeid = f"{path}::{case.get('name')}"
            self.times.append((float(case.get("time") or 0.0), nodeid))
            kinds = {child.tag for child in case}
            if "failure" in kinds:
                self.counts["failed"] += 1
                self.failures.append(f"FAILED {nodeid}")
            if "error" in kinds:
                self.counts["error"] += 1
                self.failures.append(f"ERROR {nodeid}")
            if "skipped" in kinds:
                self.counts["skipped"] += 1
            if not kinds & {"failure", "error", "skipped"}:
                self.counts["passed"] += 1


def phase(name: str, argv: list[str], junit: Path) -> tuple[int, float]:
    print(f"\n==== {name}: {' '.join(argv[3:])}", flush=True)
    started = time.monotonic()
    rc = subprocess.run([*argv, f"--junitxml={junit}", "-o", "junit_family=xunit1"], cwd=ROOT).returncode
    return rc, time.monotonic() - started


def store_durations(times: list[tuple[float, str]]) -> None:
    """Seconds per test module (what the parallel phase orders by): rounded, so a rerun rarely
    changes the file."""
    per_module: dict[str, float] = {}
    for seconds, nodeid in times:
        module = nodeid.split("::", 1)[0]
        per_module[module] = per_module.get(module, 0.0) + seconds
    DURATIONS.write_text(json.dumps({m: round(s, 1) for m, s in sorted(per_module.items())}, indent=1) + "\n")
    print(f"wrote {DURATIONS.relative_to(ROOT)} ({len(per_module)} modules)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help=f"only the tests marked neither slow, browser nor "
                                                            f"prometheus ({FAST!r})")
    parser.add_argument("-n", "--workers", type=int, default=default_workers(),
                        help="xdist workers for the parallel phase (default: %(default)s; TEST_WORKERS)")
    parser.add_argument("--store-durations", action="store_true", help="rewrite tests/durations.json")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --): paths, -x, -k ...")
    args = parser.parse_args()

    selected = f"({FAST})" if args.fast else ""
    both = [sys.executable, "-m", "pytest", "-q", "-ra", *args.pytest_args]
    workdir = Path(tempfile.mkdtemp(prefix="capacity-tests-"))
    junits = {"parallel": workdir / "parallel.xml", "alone": workdir / "alone.xml"}

    def marks(extra: str) -> list[str]:
        return ["-m", f"{selected} and {extra}" if selected else extra]

    started = time.monotonic()
    rc_par, took_par = phase(f"parallel ({args.workers} workers)",
                             [*both, "-n", str(args.workers), "--dist", "loadfile", *marks("not alone")],
                             junits["parallel"])
    rc_alone, took_alone = phase("alone (one at a time)", [*both, *marks("alone")], junits["alone"])
    took = time.monotonic() - started

    outcome = Outcome()
    for junit in junits.values():
        outcome.read(junit)
    print(f"\n==== {SLOWEST} slowest tests (setup + call + teardown)")
    for seconds, nodeid in sorted(outcome.times, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.2f}s  {nodeid}")
    if args.store_durations:
        store_durations(outcome.times)
    for line in outcome.failures:
        print(line)
    ok = rc_par in (0, NO_TESTS) and rc_alone in (0, NO_TESTS) and not (rc_par == rc_alone == NO_TESTS)
    counts = ", ".join(f"{n} {k}" for k, n in outcome.counts.items() if n)
    print(f"\n==== {'PASSED' if ok else 'FAILED'}: {counts or 'no tests'} in {took:.0f} s "
          f"(parallel {took_par:.0f} s, alone {took_alone:.0f} s; pytest exit {rc_par} and {rc_alone})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
