"""The tests' own servers (helpers/fake_llm.py, helpers/canned_metrics.py) as subprocesses.

A subprocess, never a thread: a server in the test process would share its gevent hub (Locust is
imported) and its GIL with the client being measured. Each server binds port 0 and prints
`ready on URL` once it listens, so two tests never race for a port.
"""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from helpers.paths import TESTS

READY_PREFIX = "ready on "  # what fake_llm.py and canned_metrics.py print first
FAKE_LLM = "helpers.fake_llm"
CANNED_METRICS = "helpers.canned_metrics"


class ServerProcess:
    """`python -m MODULE ARGS...` (from tests/) started and waited for; `.url` is what it reported.
    A context manager."""

    def __init__(self, module: str, *args: str, start_timeout_s: float = 30.0) -> None:
        # stderr to a file: a pipe nobody reads could fill up and block a long-lived server
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, cwd=TESTS)
        try:
            self.url = self._ready_line(module, start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _ready_line(self, module: str, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(READY_PREFIX):
            self.stop()
            raise RuntimeError(f"{module} did not report ready within {timeout_s:g} s "
                               f"(got {line!r}): {self.stderr_text()[-2000:]}")
        return line[len(READY_PREFIX):].strip()

    def stderr_text(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def fake_llm_server(cert: Path | None = None, key: Path | None = None) -> ServerProcess:
    """The scripted fake LLM server (helpers/fake_llm.py), behind TLS when given a certificate."""
    return ServerProcess(FAKE_LLM, "0", *((str(cert), str(key)) if cert and key else ()))


def canned_metrics_server() -> ServerProcess:
    """The canned /metrics server (helpers/canned_metrics.py)."""
    return ServerProcess(CANNED_METRICS, "0")
