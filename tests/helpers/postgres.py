"""A throwaway PostgreSQL server for the run catalog's tests (Debian's postgresql package).

initdb refuses to run as root: as root the cluster belongs to the `postgres` user the package
creates (runuser), in a folder of its own under /tmp (pytest's tmp_path is private to root). It
listens on 127.0.0.1 on a free port, trusts local connections, skips fsync (nothing here must
survive a crash), and is stopped and removed by `stop()`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.binaries import IN_CI
from helpers.ports import free_port


def postgres_bin() -> Path:
    """The folder with initdb and pg_ctl; skip locally when PostgreSQL is missing, fail in CI."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    if which and shutil.which("initdb"):
        return Path(which).parent
    msg = "postgresql not installed (scripts/ensure_system_deps.sh installs it)"
    if IN_CI:
        pytest.fail(msg + " — required in CI")
    pytest.skip(msg)


class Postgres:
    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.home = Path(tempfile.mkdtemp(prefix="capacity-pg-"))
        self.data = self.home / "data"
        if self.as_user:
            shutil.chown(self.home, "postgres", "postgres")
        self.port = free_port()
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        opts = f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.home / "log"), "-w", "-t", "60", "start")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{tool}: {r.stdout[-2000:]}{r.stderr[-2000:]}"

    def createdb(self, name: str) -> str:
        """A fresh database on this server; its URL."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.home, ignore_errors=True)
