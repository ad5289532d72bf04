"""The CI examples' commands as written, run locally against the simulator (docs/ci.md).

Each example's rehearse step runs `capacity run` against a real simulator — ONE short run each
(`CAPACITY_REPEATS=1`; a pipeline's default is a repeat set of 3): the GitHub Actions workflow
(deploy/ci/github-actions.yml) records into a real PostgreSQL (tests/helpers/postgres.py), the
GitLab CI job (deploy/ci/gitlab-ci.yml) into a catalog that cannot be written, so its run must
still succeed and say so in one line. Then each file's gate step, as written, judges its single
run against the blessed baseline — build a's repeat set of the same scenario on the same server
configuration, run by the simulator's engine in virtual time (tests/helpers/history_builds.py) —
and must answer "cannot decide" (exit 2), saying how many repeats would: a single run carries the
10 % allowance for what a second run would differ by. The schemas of both files are
tests/test_history_catalog.py's; the catalog and the gate on repeat sets, tests/test_history.py.

`measured`: two sweeps one after the other whose steps must be judged valid (a client-limited step
would leave the gate nothing to judge).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.history_builds import BUILDS, CI_ENV, SERVER, SIMULATOR_PROBE, record, virtual_builds
from helpers.paths import ROOT
from helpers.postgres import Postgres
from helpers.processes import env_with

from capacity_plugins.cli import main
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.launch import SimulatorProcess

pytestmark = [pytest.mark.slow, pytest.mark.measured]

# the build each example rehearses, and where its rehearse step records
CI = {"github": "b", "gitlab": "c"}


def ci_steps() -> dict[str, dict[str, str]]:
    """The rehearse and gate commands of each CI example."""
    gh = yaml.safe_load((ROOT / "deploy/ci/github-actions.yml").read_text())
    steps = {s.get("name"): s.get("run") for s in gh["jobs"]["capacity"]["steps"]}
    gl = yaml.safe_load((ROOT / "deploy/ci/gitlab-ci.yml").read_text())["capacity-gate"]["script"]
    return {"github": {"rehearse": steps["Rehearse"], "gate": steps["Gate"]},
            "gitlab": {"rehearse": gl[1], "gate": gl[2]}}


def shell_env(**extra: str) -> dict[str, str]:
    """A pipeline's environment: `capacity` on PATH (this interpreter's), the short settings, one run."""
    env = env_with(**CI_ENV, CAPACITY_REPEATS="1", **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for name in ("CAPACITY_HISTORY", "CAPACITY_MARGIN"):  # the pipeline's own, or none
        if name not in extra:
            env.pop(name, None)
    return env


def sh(command: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory) -> Any:
    tmp = tmp_path_factory.mktemp("ci")
    pg = Postgres()
    repeats, slots = BUILDS["a"]
    sim = SimulatorProcess(SimConfig(max_num_seqs=slots, **SERVER))
    try:
        (tmp / "scenarios").symlink_to(ROOT / "scenarios")
        baseline = virtual_builds(tmp / "baseline", {"a": (repeats, slots)})["a"]
        catalogs = {"github": pg.url, "gitlab": str(tmp / "history.sqlite")}
        for where in catalogs.values():
            record({"a": baseline}, where)
        steps = ci_steps()
        rehearsed = {"github": pg.url, "gitlab": str(tmp / "no-such-folder" / "h.sqlite")}
        runs: dict[str, subprocess.CompletedProcess[str]] = {}
        for ci, build in CI.items():  # one after the other: each sweep's generator needs its core on time
            runs[ci] = sh(steps[ci]["rehearse"], tmp,
                          shell_env(STAGING_URL=sim.url, BUILD=build, CAPACITY_HISTORY=rehearsed[ci]))
        yield {"tmp": tmp, "runs": runs, "steps": steps, "catalogs": catalogs}
    finally:
        sim.stop()
        pg.stop()


@pytest.mark.parametrize("ci", list(CI))
def test_the_rehearse_step_runs_once_when_told(pipelines, ci):
    r = pipelines["runs"][ci]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    # CAPACITY_REPEATS=1: one results folder, not a repeat set
    [folder] = (pipelines["tmp"] / "results" / CI[ci]).iterdir()
    assert (folder / "summary.json").exists() and not (folder / "repeats.json").exists()


def test_the_github_workflow_records_into_postgresql(pipelines, capsys):
    assert "[capacity] history: recorded as run" in pipelines["runs"]["github"].stdout
    capsys.readouterr()
    assert main(["history", "list", "--format", "json", "--label", "build=b",
                 "--history", pipelines["catalogs"]["github"]]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["kind"] == "run" and entry["labels"] == {"pipeline": "ci", "build": "b"}, entry
    # the simulator served on its own is an OpenAI-compatible server to the run (its API does not
    # name its engine), with the version its /version answers
    assert entry["engine"] == "openai-compatible" and entry["engine_version"] == SIMULATOR_PROBE["version"]["version"]
    assert entry["scenario"] == "ci-gate" and entry["repeats"] is None


def test_a_catalog_that_cannot_be_written_never_fails_the_run(pipelines):
    c = pipelines["runs"]["gitlab"]
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    said = [ln for ln in c.stderr.splitlines() if "history:" in ln]
    assert len(said) == 1 and "not recorded" in said[0] and "capacity history add" in said[0], c.stderr
    assert "Traceback" not in c.stderr


@pytest.mark.parametrize("ci", list(CI))
def test_the_gate_step_on_one_run_cannot_decide_and_says_what_would(pipelines, ci):
    env = shell_env(BUILD=CI[ci], CAPACITY_HISTORY=pipelines["catalogs"][ci])
    r = sh(pipelines["steps"][ci]["gate"], pipelines["tmp"], env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.startswith("gate: cannot decide — ") and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "repeat sets of at least 3 on each side (capacity run --repeat 3)" in r.stdout, r.stdout
    assert "baseline release (run " in r.stdout and "margin 10%" in r.stdout
