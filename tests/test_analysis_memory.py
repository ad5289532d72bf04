"""`capacity analyze` of a long run's folder inside a container's memory limit (issue 32).

A node's OOM killer and a container's limit act on the memory a process owns, and the analysis
of a long run must fit: 10 M records within 2 GB (bench/bench_analysis.py measures that, cold and
warm). Here a folder of RECORDS records over 8 steps as the product writes it (requests.jsonl and
requests.arrow) is analysed in a memory cgroup of LIMIT_MB. The interpreter with pandas, pyarrow
and matplotlib imported owns ~150 MB; the analysis reads the records step by step
(analysis/step_records.py), so what grows is one step's columns (50 k records, ~5 MB), and the
cgroup's peak read 147–153 MB. The analysis as it was before, holding every record's columns at
once (~106 bytes a record: 42 MB here), was OOM-killed at this limit (and touched 192 MB at a
limit of 192 MB): the limit tells the two apart.

The cgroup is cgroup v1's memory controller (`memory.limit_in_bytes`) or cgroup v2's
(`memory.max`), whichever this machine lets root create; without either the test is skipped
locally and fails in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.big_results import generate
from helpers.binaries import IN_CI
from helpers.paths import ROOT
from helpers.processes import CAPACITY, env_with

pytestmark = [pytest.mark.slow, pytest.mark.cpu]

RECORDS = 400_000
GAPS = 16  # per record: the frame's size does not depend on them, the folder's writing time does
LIMIT_MB = 176

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


class MemoryCgroup:
    """A fresh memory cgroup with a limit; `argv` runs a command inside it."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    def argv(self, command: list[str]) -> list[str]:
        # the shell joins the cgroup, then becomes the command: everything it starts is inside
        return ["sh", "-c", f'echo $$ > {self.path / "cgroup.procs"} && exec "$@"', "sh", *command]

    def ooms(self) -> int:
        f = self.path / ("memory.oom_control" if self.version == 1 else "memory.events")
        for line in f.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_mb(self) -> float | None:
        f = self.path / ("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")
        return int(f.read_text()) / 2**20 if f.exists() else None


def _create(limit: int) -> MemoryCgroup:
    """A memory cgroup limited to `limit` bytes, v1 first (this machine's), else v2; raises OSError."""
    name = f"capacity-test-{uuid.uuid4().hex[:8]}"
    if (V1 / "memory.limit_in_bytes").exists():
        path = V1 / name
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
        swap = path / "memory.memsw.limit_in_bytes"  # no escape into swap where the kernel accounts it
        if swap.exists():
            swap.write_text(str(limit))
        return MemoryCgroup(path, 1)
    if "memory" in (V2 / "cgroup.controllers").read_text().split():
        path = V2 / name
        path.mkdir()
        (path / "memory.max").write_text(str(limit))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
        return MemoryCgroup(path, 2)
    raise OSError("no memory controller under /sys/fs/cgroup (neither v1's memory/ nor v2's cgroup.controllers)")


@pytest.fixture
def memory_cgroup() -> Iterator[MemoryCgroup]:
    try:
        group = _create(LIMIT_MB * 2**20)
    except OSError as e:
        msg = f"cannot create a memory cgroup ({e}; needs root and a writable /sys/fs/cgroup)"
        if IN_CI:
            pytest.fail(msg + " — required in CI")
        pytest.skip(msg)
    yield group
    group.path.rmdir()  # its processes have ended: an empty cgroup is removed this way


def test_analysis_of_a_long_run_completes_inside_a_memory_limit(tmp_path: Path, memory_cgroup: MemoryCgroup) -> None:
    folder = tmp_path / "soak"
    generate(folder, RECORDS, "product", gaps=GAPS)
    assert (folder / "requests.arrow").stat().st_size > 0, "the folder lacks the records sink's typed copy"
    r = subprocess.run(memory_cgroup.argv([*CAPACITY, "analyze", str(folder), "--quiet"]),
                       capture_output=True, text=True, timeout=240, env=env_with(), cwd=ROOT)
    peak = memory_cgroup.peak_mb()
    said = f"rc {r.returncode}, cgroup peak {peak} MB of {LIMIT_MB} MB, oom kills {memory_cgroup.ooms()}; {r.stderr[-1500:]}"
    assert r.returncode == 0, said
    assert memory_cgroup.ooms() == 0, said
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["meta"]["requests_total"] == RECORDS, said
    assert [s["requests"] for s in summary["steps"]] == [RECORDS // 8] * 8, said
    assert os.path.exists(folder / "report.html"), said
