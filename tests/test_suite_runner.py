"""How the suite itself runs (scripts/run_tests.py): parallel xdist workers under Locust's gevent
patching, whole modules longest first, then the `measured` tests two at a time, then the `alone`
tests, and one result over all three."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from helpers.paths import ROOT
from helpers.processes import run
from helpers.schedule import longest_modules_first


def _outside_xdist() -> dict[str, str]:
    """This environment without the variables an xdist worker sets: a pytest started from a test is
    a controller of its own, not one of this run's workers (helpers/xdist_threads.py reads them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def test_xdist_workers_run_the_suites_tests_under_locusts_patching():
    # The shape test of helpers/xdist_threads.py: without it each worker dies with gevent's LoopExit
    # before its first test; a change in how execnet / xdist workers queue tests fails here.
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
               "tests/test_ids.py", "tests/test_steps.py"], env=_outside_xdist(), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "LoopExit" not in text and " passed" in text, text[-4000:]


def test_modules_run_longest_first_each_in_one_piece(tmp_path: Path):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/test_a.py": 1.0, "tests/test_b.py": 30.0, "tests/test_c.py": 5.0}))
    ids = ["tests/test_a.py::x", "tests/test_a.py::y", "tests/test_b.py::x", "tests/test_c.py::x",
           "tests/test_c.py::y", "tests/test_new.py::x", "tests/test_b.py::y"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    longest_modules_first(items, durations)
    # b (30 s), then c (5 s) and the unknown module (the median: 5 s) in collection order, then a
    assert [i.nodeid for i in items] == [
        "tests/test_b.py::x", "tests/test_b.py::y", "tests/test_c.py::x", "tests/test_c.py::y",
        "tests/test_new.py::x", "tests/test_a.py::x", "tests/test_a.py::y"]


def test_one_result_over_the_three_phases_and_a_failure_in_any_fails_the_run(tmp_path: Path):
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_mixed.py").write_text(textwrap.dedent("""
        import os

        import pytest

        def test_parallel_passes():
            pass

        def test_parallel_skips():
            pytest.skip("nothing here")

        @pytest.fixture(scope="module")
        def sweep(tmp_path_factory):
            # one sweep the module's measured tests share: set up once, on one worker
            with open(os.environ["SETUPS_FILE"], "a") as f:
                f.write("sweep ")

        @pytest.mark.measured
        def test_measured_passes(sweep):
            pass

        @pytest.mark.measured
        def test_measured_too(sweep):
            pass

        @pytest.mark.cpu
        def test_cpu_runs_niced():
            import os
            assert os.nice(0) == 19, "the cpu run is at the lowest priority"

        @pytest.mark.background
        def test_background_runs_niced():
            import os
            assert os.nice(0) == 19, "the background run is at the lowest priority"

        @pytest.mark.alone
        def test_alone_fails():
            assert False, "the alone phase's failure"
    """))
    setups = tmp_path / "setups.txt"
    out = run([sys.executable, str(ROOT / "scripts" / "run_tests.py"), "-n", "2", "--", str(tests)],
              env={**_outside_xdist(), "SETUPS_FILE": str(setups)}, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-4000:]
    assert "FAILED" in text and "test_mixed.py::test_alone_fails" in text, text[-4000:]
    assert "FAILED: 5 passed, 1 failed, 1 skipped" in text, text[-4000:]
    # three phases, in order: the measured tests two at a time with the background run beside them, then the alone one
    order = [text.index(s) for s in ("==== parallel", "==== measured (2 at a time", "==== background (cpu and",
                                     "==== alone")]
    assert order == sorted(order), text[-4000:]
    assert "slowest tests" in text, text[-4000:]
    assert setups.read_text() == "sweep ", "the measured tests sharing a module's sweep ran it once"
