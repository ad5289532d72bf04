"""Run a Dockerfile's build stages without Docker (tests only; there is no Docker daemon here).

Only what the image's Python stages use is understood: FROM (a stage), WORKDIR, COPY from the
build context (honouring the .dockerignore allowlist) or `--from=` another stage, and RUN
through `/bin/sh -c` as Docker does. Every stage shares one fake root folder: the absolute paths
the Dockerfile names (`/src`, `/wheels`, `/opt/capacity`, …) are rewritten under it, and
`python` is the interpreter running the tests (its base, not a venv). ARG/ENV/USER/EXPOSE/
ENTRYPOINT/CMD describe the runtime image and are not executed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser


@dataclass
class Stage:
    name: str
    base: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, value)


def parse(dockerfile: Path) -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for item in DockerfileParser(path=str(dockerfile)).structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "FROM":
            base, _, name = value.partition(" AS ")
            current = Stage(name=name.strip() or f"stage{len(stages)}", base=base.strip())
            stages[current.name] = current
        elif current is not None and instruction != "COMMENT":
            current.steps.append((instruction, value))
    return stages


def copy_from(stage: Stage) -> list[str]:
    """Stages this one copies from (`COPY --from=NAME`)."""
    return [m.group(1) for ins, value in stage.steps if ins == "COPY" for m in [re.match(r"--from=(\S+)", value)] if m]


def dockerignore_allows(context: Path, relpath: str) -> bool:
    """The last matching .dockerignore line wins; a `!` line re-includes (Docker's rule)."""
    allowed = True
    ignore = context / ".dockerignore"
    for raw in ignore.read_text().splitlines() if ignore.exists() else []:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = pattern.rstrip("/")
        if fnmatch.fnmatch(relpath, pattern) or fnmatch.fnmatch(relpath.split("/")[0], pattern):
            allowed = negate
    return allowed


class Builder:
    """Executes stages into `root`; `paths` are the absolute paths the Dockerfile uses."""

    def __init__(self, context: Path, root: Path, paths: tuple[str, ...], *, pip_cache: bool = True) -> None:
        self.context = context
        self.root = root
        self.paths = paths
        self.pip_cache = pip_cache
        self.bin = root / ".shim-bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        python = getattr(sys, "_base_executable", sys.executable)
        (self.bin / "python").unlink(missing_ok=True)
        (self.bin / "python").symlink_to(python)
        self.log: list[str] = []

    def host(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def rewrite(self, text: str) -> str:
        for p in sorted(self.paths, key=len, reverse=True):
            text = re.sub(rf"(?<![\w.\-/]){re.escape(p)}(?=[/\s\"'\[]|$)", str(self.host(p)), text)
        return text

    def run_stage(self, stage: Stage) -> None:
        workdir = self.root
        for instruction, value in stage.steps:
            if instruction == "WORKDIR":
                workdir = self.host(value)
                workdir.mkdir(parents=True, exist_ok=True)
            elif instruction == "COPY":
                self._copy(value, workdir)
            elif instruction == "RUN":
                cmd = self.rewrite(value)
                if self.pip_cache:
                    # The only change to a step: reuse pip's download cache between test runs.
                    cmd = cmd.replace(" --no-cache-dir", "")
                env = dict(os.environ, PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")
                env.pop("VIRTUAL_ENV", None)
                env.pop("PYTHONPATH", None)
                proc = subprocess.run(["/bin/sh", "-c", cmd], cwd=workdir, env=env, capture_output=True,
                                      text=True, timeout=900)
                self.log.append(f"$ {cmd}\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
                if proc.returncode != 0:
                    raise AssertionError(f"stage {stage.name}: RUN failed ({proc.returncode}):\n{self.log[-1]}")

    def _copy(self, value: str, workdir: Path) -> None:
        parts = value.split()
        from_stage = None
        if parts[0].startswith("--from="):
            from_stage = parts.pop(0).split("=", 1)[1]
        *sources, dest = parts
        if from_stage is not None:
            # One shared root: the other stage's files are already where this COPY puts them.
            assert all(self.host(s).exists() for s in sources), (from_stage, sources)
            assert all(s == dest for s in sources), "COPY --from to another path is not supported here"
            return
        target = self.host(dest) if dest.startswith("/") else (workdir / dest)
        for src in sources:
            assert dockerignore_allows(self.context, src), f"COPY {src}: excluded by .dockerignore"
            origin = self.context / src
            if origin.is_dir():
                shutil.copytree(origin, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                (target if dest.endswith("/") else target.parent).mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name if dest.endswith("/") else target)


def folder_bytes(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
