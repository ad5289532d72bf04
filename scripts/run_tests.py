"""The test suite in three phases, one result: what `make test` and `make test-fast` run.

1. parallel: the tests marked neither `alone`, `measured`, `cpu` nor `background`, on N pytest-xdist workers. Most of
   the suite waits on the processes it starts (real Locust runs, simulators, servers), so workers
   overlap those waits. A worker takes a whole module at a time, the longest first
   (tests/helpers/schedule.py, tests/durations.json).
2. measured: the tests marked `measured` (each sweeps a real simulator and asserts what it
   measured: a knee, an SLO verdict), two at a time: a sweep uses a fraction of a core (its
   simulator mostly sleeps through decode steps), and two of them leave each other's generator on
   time; beside the parallel phase they were judged client limited. Beside them only the tests
   marked `cpu` (pure computation: property tests, calibration studies, analyses of written
   results) or `background` (long tests that wait on their processes and assert nothing about
   time: the parallel phase is CPU-bound, the measured one leaves about a core idle), on three
   workers at the lowest CPU priority (nice 19): the kernel hands a waking generator the core at
   once, and the background takes the time the sweeps leave idle.
3. alone: the tests marked `alone` (they start CPU burners or several generator processes, or
   assert on this machine's spare CPU itself: a CPU share, event-loop lag), one at a time, with
   nothing else running.

--fast (the tests not marked slow, browser or prometheus): the same phases over what is left.

Then one summary over all the runs: the counts, every failure, the 25 slowest tests (setup + call
+ teardown). The exit status is non-zero when any run failed. tests/README.md says which marker a
test needs.

    python scripts/run_tests.py                      # everything (make test)
    python scripts/run_tests.py --fast               # without slow/browser/prometheus (make test-fast)
    python scripts/run_tests.py -n 3 -- -x tests/test_users.py   # workers; the rest goes to pytest
    python scripts/run_tests.py --store-durations    # rewrite tests/durations.json from this run
    python scripts/run_tests.py --cov                # and the product's line coverage over all three
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
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
FAST = "not slow and not browser and not prometheus"
SLOWEST = 25
# Measured sweeps at once (phase 2): two on a 2-core machine held; more would starve their generators.
MEASURED_WORKERS = 2
# Workers of the background run beside them: its tests mostly wait on their processes or compute.
BACKGROUND_WORKERS = 3
# pytest's "no tests were collected": a run with nothing to do (no `alone` test under -k ...).
NO_TESTS = 5


def default_workers(fast: bool) -> int:
    """Two more than the cores (--fast: one more), at least 3: most tests sleep through their steps
    while the processes they started work, and a worker waiting on a subprocess it started leaves
    its core to another (on 2 cores, 3 workers kept the load average near 1.5; 4 took the parallel
    phase from ~550 s to 440 s). TEST_WORKERS overrides."""
    if os.environ.get("TEST_WORKERS"):
        return max(2, int(os.environ["TEST_WORKERS"]))
    cores = os.cpu_count() or 1
    return max(2, cores + 1) if fast else max(3, min(8, cores + 2))


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


@dataclass
class Run:
    """One pytest process: its own JUnit XML; its output on this terminal, or (beside another run)
    in a file shown when it ends."""

    name: str
    argv: list[str]
    junit: Path
    env: dict[str, str] | None = None
    started: float = 0.0
    took: float = 0.0
    rc: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    out: IO[bytes] | None = None

    def start(self) -> None:
        shown = self.argv[self.argv.index("pytest") + 1:]
        print(f"\n==== {self.name}: pytest {' '.join(shown)}" + (" (its output when it ends)" if self.log else ""),
              flush=True)
        # read back through this open handle: whatever a /tmp cleaner does meanwhile, it is shown
        self.out = self.log.open("w+b") if self.log else None
        self.started = time.monotonic()
        self.proc = subprocess.Popen([*self.argv, f"--junitxml={self.junit}", "-o", "junit_family=xunit1"],
                                     cwd=ROOT, env=self.env, stdout=self.out,
                                     stderr=subprocess.STDOUT if self.out else None)

    def wait(self) -> int:
        assert self.proc is not None
        self.rc = self.proc.wait()
        self.took = time.monotonic() - self.started
        if self.out is not None:
            print(f"\n==== {self.name}: output", flush=True)
            self.out.seek(0)
            sys.stdout.write(self.out.read().decode(errors="replace"))
            sys.stdout.flush()
            self.out.close()
        return self.rc

    @property
    def ok(self) -> bool:
        return self.rc in (0, NO_TESTS)


def store_durations(times: list[tuple[float, str]]) -> None:
    """Seconds per test module (what the parallel phase orders by): rounded, so a rerun rarely
    changes much of the file."""
    per_module: dict[str, float] = {}
    for seconds, nodeid in times:
        module = nodeid.split("::", 1)[0]
        per_module[module] = per_module.get(module, 0.0) + seconds
    DURATIONS.write_text(json.dumps({m: round(s, 1) for m, s in sorted(per_module.items())}, indent=1) + "\n")
    print(f"wrote {DURATIONS.relative_to(ROOT)} ({len(per_module)} modules)")


def print_coverage(workdir: Path) -> None:
    env = dict(os.environ, COVERAGE_FILE=str(workdir / ".coverage"))
    parts = [str(p) for p in workdir.glob(".coverage.*")]
    subprocess.run([sys.executable, "-m", "coverage", "combine", "-q", *parts], cwd=ROOT, env=env, check=False)
    report = subprocess.run([sys.executable, "-m", "coverage", "report"], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=False)
    total = [line for line in report.stdout.splitlines() if line.startswith("TOTAL")]
    (workdir / "coverage.txt").write_text(report.stdout + report.stderr)
    print(f"\n==== coverage of capacity_plugins (every file: {workdir / 'coverage.txt'})")
    print(total[0] if total else report.stdout[-2000:] + report.stderr[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help=f"only the tests marked neither slow, browser nor "
                                                            f"prometheus ({FAST!r})")
    parser.add_argument("-n", "--workers", type=int, default=None,
                        help="xdist workers in the parallel phase; default: the cores + 2, at least 3 "
                             "(--fast: the cores + 1); TEST_WORKERS")
    parser.add_argument("--measured-workers", type=int, default=MEASURED_WORKERS,
                        help=f"measured tests at once (default {MEASURED_WORKERS}; 1: one at a time)")
    parser.add_argument("--store-durations", action="store_true", help="rewrite tests/durations.json")
    parser.add_argument("--cov", action="store_true", help="measure the product's line coverage (pytest-cov, "
                                                           "[tool.coverage] in pyproject.toml) over the three runs")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --): paths, -x, -k ...")
    args = parser.parse_args()

    workers = args.workers or default_workers(args.fast)
    pytest = [sys.executable, "-m", "pytest", "-q", "-ra", *args.pytest_args]
    workdir = Path(tempfile.mkdtemp(prefix="capacity-tests-"))
    # The suite starts hundreds of Python processes: with bytecode writing off (a CI image's
    # PYTHONDONTWRITEBYTECODE=1) each would compile the project's modules (and pytest its rewritten
    # tests) again; the first one writes them to __pycache__ (git-ignored) for the rest.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def marks(which: str) -> list[str]:
        return ["-m", f"({FAST}) and ({which})" if args.fast else which]

    parallel = Run(f"parallel ({workers} workers)",
                   [*pytest, "-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder",
                    *marks("not alone and not measured and not cpu and not background")],
                   workdir / "parallel.xml", env=env)
    background = Run("background (cpu and background tests beside the measured ones, nice 19)",
                     ["nice", "-n", "19", *pytest, "-n", str(BACKGROUND_WORKERS), "--dist", "loadfile",
                      *marks("(cpu or background) and not alone and not measured")],
                     workdir / "background.xml", env=env, log=workdir / "background.log")
    # --dist loadfile: a module at a time to whichever of the two is free, the longest first (as
    # collected): a module's tests often share one sweep (a module-scoped fixture), which a test at a
    # time (--dist load) set up on both workers. (xdist's loadgroup would group them per test, but it
    # silently stopped grouping under pytest 9.2: pytest-dev/pytest-xdist#1386.)
    pair = ["-n", str(args.measured_workers), "--dist", "loadfile", "--no-loadscope-reorder"] \
        if args.measured_workers > 1 else []
    measured = Run(f"measured ({args.measured_workers} at a time, only the background run beside)",
                   [*pytest, *pair, *marks("measured and not alone")], workdir / "measured.xml", env=env)
    alone = Run("alone (one at a time, nothing beside)", [*pytest, *marks("alone")], workdir / "alone.xml", env=env)

    runs = (parallel, background, measured, alone)
    if args.cov:  # each run its own data file, combined once all have ended
        for run in runs:
            run.argv += ["--cov", "--cov-report="]
            run.env = dict(env, COVERAGE_FILE=str(workdir / f".coverage.{run.junit.stem}"))

    started = time.monotonic()
    # One phase after another (each phase's premise is what runs beside it); the background run beside the
    # measured one, both done before the alone phase.
    for phase in ((parallel,), (measured, background), (alone,)):
        for run in phase:
            run.start()
        pending = list(phase)
        while pending:  # each run's time is its own: whichever ends first is waited for first
            for run in [r for r in pending if r.proc is not None and r.proc.poll() is not None]:
                run.wait()
                pending.remove(run)
            if pending:
                time.sleep(0.5)
    took = time.monotonic() - started

    outcome = Outcome()
    for run in runs:
        outcome.read(run.junit)
    print(f"\n==== {SLOWEST} slowest tests (setup + call + teardown)")
    for seconds, nodeid in sorted(outcome.times, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.2f}s  {nodeid}")
    if args.store_durations:
        store_durations(outcome.times)
    if args.cov:
        print_coverage(workdir)
    for line in outcome.failures:
        print(line)
    ok = all(run.ok for run in runs) and any(run.rc == 0 for run in runs)
    counts = ", ".join(f"{n} {k}" for k, n in outcome.counts.items() if n)
    phases = "; ".join(f"{run.name.split(' (')[0]} {run.took:.0f} s (exit {run.rc})" for run in runs)
    print(f"\n==== {'PASSED' if ok else 'FAILED'}: {counts or 'no tests'} in {took:.0f} s ({phases})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
