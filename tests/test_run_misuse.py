"""Every misuse of `capacity run` is one line and exit 2, before any side effect: no results
folder, no simulator, no preflight."""

from __future__ import annotations

import pytest
from helpers.processes import capacity
from helpers.scenarios import write_scenario

pytestmark = pytest.mark.slow  # `capacity run` processes (each exits 2 before it starts anything)


@pytest.fixture
def scenario(tmp_path):
    return write_scenario(tmp_path, "m", target={"url": "embedded"}, load={"levels": [1], "step_s": 2, "warmup_s": 0})


@pytest.mark.parametrize(("extra", "says"), [
    (["--exporter-port", "99999"], "--exporter-port: must be a port"),
    (["--web", "--web-port", "99999"], "--web-port: must be a port"),
    (["--master-bind-port", "0", "--master"], "--master-bind-port: must be a port"),
    (["--master", "--expect-workers", "0"], "--expect-workers: a master needs at least 1 worker"),
    (["--processes", "0"], "--processes: must be a positive number"),
    (["--processes", "2", "--master"], "--processes runs its own master"),
    (["--repeat", "0"], "--repeat: must be at least 1"),
    (["--web", "--repeat", "2"], "--repeat has no meaning with --web"),
    (["--master", "--worker"], "exclude each other"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_flags(scenario, tmp_path, extra, says):
    r = capacity("run", str(scenario), *extra, timeout=60)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()  # nothing was created


def test_output_that_is_a_file_or_unwritable(scenario, tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for output, says in ((a_file, "exists and is not a folder"), ("/proc/forbidden", "cannot create a results folder")):
        r = capacity("run", str(scenario), "--output", str(output), timeout=60)
        assert r.returncode == 2, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()
