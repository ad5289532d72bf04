"""Start the simulator as a subprocess and wait until it serves.

A subprocess, never a thread: the simulator must not share a GIL or a gevent hub with the Locust
process measuring it, or the measurement would measure itself. Port 0 lets the simulator bind a
free port and report it on its ready line, so two tests can never race for the same port.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from capacity_plugins.errors import RunError
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.server import READY_PREFIX

_ROOT = Path(__file__).resolve().parents[2]


class SimulatorProcess:
    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0,
                 truth_log: Path | None = None, start_timeout_s: float = 30.0) -> None:
        self.config = config or SimConfig()
        self.host = host
        # absolute: the simulator runs with the repository as its working directory
        self.truth_log = Path(truth_log).resolve() if truth_log is not None else None
        argv = [sys.executable, "-m", "capacity_plugins.simulator", "--host", host, "--port", str(port),
                "--exit-on-stdin-eof"]
        if self.truth_log is not None:
            argv += ["--truth-log", str(self.truth_log)]
        argv += self.config.to_argv()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.PIPE,
                                      env=env, cwd=str(_ROOT))
        try:
            self.url = self._wait_ready(start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.port = int(self.url.rsplit(":", 1)[1])

    def _wait_ready(self, timeout_s: float) -> str:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buf = b""
        # a selector, not select(): a process with over 1024 files open (a long test session, a
        # busy master) gets descriptors select() refuses
        with selectors.DefaultSelector() as waiting:
            waiting.register(fd, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RunError(f"simulator did not report ready within {timeout_s:.0f} s{self._stderr_tail()}")
                if waiting.select(min(left, 0.5)):
                    data = os.read(fd, 4096)
                    if not data:
                        self._proc.wait(timeout=5)
                        raise RunError(f"simulator exited with code {self._proc.returncode} before it was ready"
                                       f"{self._stderr_tail()}")
                    buf += data
        line = buf.split(b"\n", 1)[0].decode(errors="replace")
        if not line.startswith(READY_PREFIX):
            raise RunError(f"simulator printed {line!r} instead of its ready line")
        url = line[len(READY_PREFIX):].strip()
        self._wait_health(url, deadline)
        return url

    def _wait_health(self, url: str, deadline: float) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=2) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RunError(f"simulator at {url} does not answer /health{self._stderr_tail()}")
            time.sleep(0.05)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text.splitlines()[-1]}" if text else ""

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """Stop the simulator (SIGTERM, then SIGKILL); returns its exit code."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=timeout_s)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
        return self._proc.returncode

    def __enter__(self) -> SimulatorProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SimulatorProcess({getattr(self, 'url', '?')}, pid={self._proc.pid})"
