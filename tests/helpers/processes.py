"""Running the product's programs as real processes, the way a user's venv does.

Every program runs under the interpreter running the tests (`sys.executable -m ...`), so a test
never depends on where the venv's console scripts live: `capacity` is `python -m capacity_plugins`
and `locust` is `python -m locust`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import psutil

from helpers.paths import ROOT

CAPACITY: list[str] = [sys.executable, "-m", "capacity_plugins"]
LOCUST: list[str] = [sys.executable, "-m", "locust"]
# import-linter's `lint-imports` (it has no `python -m` entry): it reads the contracts from the
# pyproject.toml in its working folder and imports the package found there first.
LINT_IMPORTS: list[str] = [sys.executable, "-c",
                           "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"]
LOCUSTFILE = str(ROOT / "locustfiles" / "llm.py")


def env_with(*, path: Sequence[Path] = (), **extra: str) -> dict[str, str]:
    """This environment with the repository (then `path`) first on PYTHONPATH, unbuffered output,
    plus the variables in `extra`."""
    env = dict(os.environ)
    first = [str(ROOT), *map(str, path)]
    env["PYTHONPATH"] = os.pathsep.join(first + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run(argv: Sequence[str], *, timeout: float = 120, env: dict[str, str] | None = None,
        cwd: Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    """Run a command to its end (killed after `timeout` s) and return its exit code and text output."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env or env_with(),
                          cwd=cwd)


def capacity(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
             cwd: Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    """`capacity ARGS...` to its end."""
    return run([*CAPACITY, *args], timeout=timeout, env=env, cwd=cwd)


def python(code: str, *, timeout: float = 120, env: dict[str, str] | None = None,
           cwd: Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` in a fresh interpreter (nothing this test process imported is loaded there)."""
    return run([sys.executable, "-c", code], timeout=timeout, env=env, cwd=cwd)


def locust_argv(args: Sequence[str], locustfile: str | Path = LOCUSTFILE) -> list[str]:
    return [*LOCUST, "-f", str(locustfile), *args]


def run_locust(args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 90,
               locustfile: str | Path = LOCUSTFILE) -> subprocess.CompletedProcess[str]:
    """`locust -f LOCUSTFILE ARGS...` to its end (the thin locustfile unless told otherwise)."""
    return run(locust_argv(args, locustfile), timeout=timeout, env=env)


def popen(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | str = ROOT,
          stdout: int | IO[bytes] | None = subprocess.PIPE, stderr: int | IO[bytes] | None = subprocess.STDOUT,
          text: bool = True, process_group: int | None = None) -> subprocess.Popen:
    """Start a command in the background with the tests' environment (output piped, stderr merged);
    `process_group=0` puts it in a group of its own (a terminal's Ctrl-C goes to the group)."""
    return subprocess.Popen(list(argv), env=env or env_with(), cwd=cwd, stdout=stdout, stderr=stderr, text=text,
                            process_group=process_group)


def stop(*procs: subprocess.Popen, timeout: float = 10) -> None:
    """Kill whatever is still running among `procs` and reap it."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)


class LoggedProcess:
    """A background process whose output goes to a log file (readable while it runs); `group`: in a
    process group of its own, which Ctrl-C (`interrupt`) and `close` reach whole, as a terminal's do."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | str = ROOT, group: bool = False) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self._group = group
        self.proc = subprocess.Popen(list(argv), cwd=cwd, env=env or env_with(), stdout=self._log,
                                     stderr=subprocess.STDOUT, process_group=0 if group else None)

    def _signal(self, sig: int) -> None:
        if self._group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def died(self) -> str | None:
        """None while running; a message with the log's tail once it exited (helpers.waiting.Watched)."""
        if self.proc.poll() is None:
            return None
        return f"{Path(str(self.proc.args[0])).name} exited ({self.proc.returncode}):\n{self.log()[-3000:]}"

    def tail(self) -> str:
        return self.log()[-3000:]

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C (Locust's clean shutdown: stop users, write files) and wait."""
        if self.proc.poll() is None:
            self._signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


class Watch:
    """helpers.waiting.Watched for a plain Popen: a wait fails at once, with its output, if it exits."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def died(self) -> str | None:
        if self.proc.poll() is None:
            return None
        output = "".join(o.decode(errors="replace") if isinstance(o, bytes) else o
                         for o in self.proc.communicate() if o)
        return f"{self.proc.args!r} exited ({self.proc.returncode}):\n{output[-4000:]}"

    def tail(self) -> str:
        return ""


def processes_with(token: str) -> list[int]:
    """Pids whose command line contains `token` (to see that a teardown left nothing running)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmd and "pytest" not in cmd:
                found.append(int(d.name))
    return found


def descendants(pid: int, token: str = "") -> list[psutil.Process]:
    """The processes under `pid` right now whose command line contains `token` (all when empty).

    Processes come and go while they are listed (a Locust worker that just finished, a zombie not
    yet reaped, `pid` itself gone): one that has exited by the time it is read is left out, never
    an error, so a caller polls with `wait_until` rather than catching psutil's exceptions."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            cmdline = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # psutil.ZombieProcess is a NoSuchProcess
            continue
        if token in cmdline:
            found.append(child)
    return found


def read_until(proc: subprocess.Popen, prefix: str, timeout: float) -> str | None:
    """Read `proc`'s text stdout line by line until one starts with `prefix` (returned), the output
    ends or `timeout` s have passed (None). The clock is checked as each line arrives."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.startswith(prefix):
            return line
        if time.monotonic() > deadline:
            break
    return None
