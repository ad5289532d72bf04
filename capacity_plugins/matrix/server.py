"""One entry's server: start its command, wait until it is ready, tear it down — whatever happened.

- **The command** runs through `/bin/sh -c` (environment assignments, `&&`, a container start all
  work) with the entry's `env` on top of ours and this installation's `bin/` first on PATH, so
  `capacity simulate` is the same `capacity`. Its output goes to `server.log` in the entry's
  folder. It gets its own process group (teardown stops everything it started) but stays in our
  session and so in our scheduling autogroup, like `capacity run`'s Locust child
  (runner/child.py): a server in another autogroup would be scheduled against the load
  generator on a shared host. On Linux it also gets SIGTERM if the matrix dies.
- **A command that exits** with 0 before the server is ready reconfigured a server that keeps
  running elsewhere (the entry's `url`): the readiness check goes on. Any other code means it
  could not start: the entry fails at once with the code and the last line of its log.
- **Ready** is a 2xx answer to one GET: `ready.url`, else the dialect's readiness route
  (Triton's `/v2/health/ready`) or model listing (`/v1/models`, `/info`, `/api/tags`), with the
  scenario's own headers (API key; Basic auth from `user:password@` in the URL), polled every
  0.5 s until `ready.timeout_s`.
- **Teardown**: the entry's `teardown` command (output to `teardown.log`), then SIGTERM to what is
  left of the started process group, SIGKILL after `STOP_TIMEOUT_S`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import quote

from capacity_plugins.contracts.processes import PR_SET_PDEATHSIG, libc_prctl
from capacity_plugins.contracts.redaction import basic_auth, strip_userinfo
from capacity_plugins.matrix.spec import PORT, Entry

POLL_S = 0.5
PROBE_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 15.0
TEARDOWN_TIMEOUT_S = 120.0


class EntryFailed(Exception):
    """The entry could not start or become ready; the message is its row's reason."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fill(text: str, port: int | None) -> str:
    return text.replace(PORT, str(port)) if port is not None else text


def default_ready_path(dialect: object, model: str | None) -> str:
    """The dialect's readiness route, else its model listing, else /health."""
    path = getattr(dialect, "ready_path", None) or getattr(dialect, "models_path", None) or "/health"
    return path.replace("{model}", quote(model or "", safe=""))


def _in_child(prctl: Callable[..., int] | None) -> None:
    """Between fork and exec: default signals, and the server dies with us (prctl looked up before the fork)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _preexec() -> Callable[[], None]:
    return functools.partial(_in_child, libc_prctl())


def command_env(entry: Entry, port: int | None) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir] + ([env["PATH"]] if env.get("PATH") else []))
    env["PYTHONUNBUFFERED"] = "1"  # a Python server's log reaches server.log as it is written
    env.update({k: fill(v, port) for k, v in entry.env.items()})
    return env


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:300]}" if lines else ""


class Server:
    """The entry's server from start to teardown. `start()` raises EntryFailed; `stop()` never raises."""

    def __init__(self, entry: Entry, folder: Path, port: int | None, headers: dict[str, str], insecure: bool) -> None:
        self.entry = entry
        self.folder = folder
        self.port = port
        self.url = fill(entry.url, port)
        self.headers = headers
        self.tls = ssl._create_unverified_context() if insecure else None  # unverified only when the scenario opts in
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"

    def start(self) -> None:
        if self.entry.command is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._log = self.log_path.open("ab")
            self.proc = subprocess.Popen(["/bin/sh", "-c", fill(self.entry.command, self.port)],
                                         stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                         env=command_env(self.entry, self.port), process_group=0, preexec_fn=_preexec())
        except OSError as e:
            raise EntryFailed(f"command could not be started: {e}") from None

    def wait_ready(self, ready_path: str) -> str:
        """Poll until a 2xx answer; the URL that answered. EntryFailed with the last problem otherwise."""
        target = fill(self.entry.ready.url or ready_path, self.port)
        url = self.url + target if target.startswith("/") else target
        deadline = time.monotonic() + self.entry.ready.timeout_s
        exited: int | None = None
        last = "no answer yet"
        while True:
            if self.proc is not None and exited is None:
                code = self.proc.poll()
                if code not in (None, 0):
                    raise EntryFailed(f"command exited with code {code} before the server was ready"
                                      f"{_last_line(self.log_path)} (log: {self.log_path.name})")
                exited = code
            last = self._probe(url)
            if not last:
                return url
            if time.monotonic() >= deadline:
                note = " (its command exited with 0)" if exited == 0 else ""
                raise EntryFailed(f"not ready within {self.entry.ready.timeout_s:g} s{note}: "
                                  f"GET {strip_userinfo(url)}: {last}")
            time.sleep(POLL_S)

    def _probe(self, url: str) -> str:
        """'' when the server answered 2xx; else what it said."""
        headers = dict(self.headers)
        basic = basic_auth(url)  # user:password@ in the URL, as the runs send it; an API key wins
        if basic is not None and not headers.get("Authorization", "").startswith("Bearer "):
            headers["Authorization"] = basic
        req = urllib.request.Request(strip_userinfo(url), headers=headers, method="GET")
        try:
            with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S, context=self.tls) as r:  # the entry's http(s) URL
                return "" if 200 <= r.status < 300 else f"HTTP {r.status}"
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            return str(getattr(e, "reason", e))

    def stop(self) -> str | None:
        """Teardown: the entry's command, then what is left of the process group. A problem, or None."""
        problem = None
        if self.entry.teardown is not None:
            problem = self._teardown_command()
        if self.proc is not None:
            self._stop_group()
        if self._log is not None:
            self._log.close()
            self._log = None
        return problem

    def _teardown_command(self) -> str | None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "teardown.log"
        assert self.entry.teardown is not None
        try:
            with log.open("ab") as out:
                r = subprocess.run(["/bin/sh", "-c", fill(self.entry.teardown, self.port)], stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, env=command_env(self.entry, self.port),
                                   timeout=TEARDOWN_TIMEOUT_S, process_group=0, preexec_fn=_preexec())
        except subprocess.TimeoutExpired:
            return f"teardown command did not finish within {TEARDOWN_TIMEOUT_S:g} s"
        except OSError as e:
            return f"teardown command could not run: {e}"
        if r.returncode != 0:
            return f"teardown command exited with code {r.returncode}{_last_line(log)}"
        return None

    def _stop_group(self) -> None:
        assert self.proc is not None
        pgid = self.proc.pid  # process_group=0: the group is the command's own pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        # Whatever the shell started may outlive it: wait for the whole group, then kill what is left.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            self.proc.poll()  # reap the leader, so a finished group reads as gone
            if not _group_alive(pgid):
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
