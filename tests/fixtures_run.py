"""Helpers for end-to-end rehearsal tests: write a scenario, run `capacity run` / Locust, read results.

Plain functions (import them: `from fixtures_run import ...`), so they work whether or not this
module is listed in conftest's pytest_plugins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CAPACITY = [sys.executable, "-m", "capacity_plugins"]


# Test sweeps run steps of a few seconds: they ask for a handful of measured requests per step
# (the product's default, 100, is for real decisions; the analysis says how wide the intervals are).
TEST_MIN_REQUESTS = 10


def write_scenario(tmp_path: Path, name: str = "t", **sections: Any) -> Path:
    """A scenario file; `output` defaults to tmp_path/results, the corpus to a small builtin one,
    `load.min_requests` to TEST_MIN_REQUESTS unless the test sets it."""
    data: dict[str, Any] = {"name": name, "output": str(tmp_path / "results")}
    data["corpus"] = {"min_distinct": 10}
    data.update(sections)
    if isinstance(data.get("load"), dict):
        data["load"] = {"min_requests": TEST_MIN_REQUESTS, **data["load"]}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["PYTHONUNBUFFERED"] = "1"
    return e


def capacity(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CAPACITY, *args], capture_output=True, text=True, timeout=timeout, env=env(), cwd=ROOT)


def results_dir(stdout: str) -> Path:
    """The folder `capacity run` printed last ('[capacity] results: PATH')."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("[capacity] results: "):
            return Path(line.split(": ", 1)[1].split(" (")[0])
    raise AssertionError(f"no results line in output:\n{stdout[-2000:]}")


def only_folder(parent: Path) -> Path:
    folders = [p for p in parent.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def read_records(folder: Path) -> list[dict[str, Any]]:
    with (folder / "requests.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def read_steps(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / "steps.json").read_text())["steps"]


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "meta.json").read_text())
