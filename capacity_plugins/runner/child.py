"""The Locust child of `capacity run`: how it is started, stopped and never left behind.

- **Same session, own process group.** A terminal's Ctrl-C reaches only `capacity run` (the
  foreground group), which turns it into one SIGINT to Locust: users stopped, in-flight requests
  recorded as cancelled, files written; a second Ctrl-C kills the group. The child stays in the
  parent's *session*, and so in its scheduling autogroup (`/proc/PID/autogroup`): a new session
  would put the load generator in a group of its own that the kernel schedules against a busy
  server's group, starving it on a shared host (its timestamps late, its TTFT inflated).
- **No load outlives its supervisor.** On Linux the kernel sends the child SIGTERM when
  `capacity run` dies (`PR_SET_PDEATHSIG`); everywhere, the child also holds the read end of a
  pipe whose write end only `capacity run` has, and a watchdog in the child (swarm/supervisor.py)
  stops the run when it reads EOF — it sends nothing where the kernel's signal is armed, so the
  child gets one SIGTERM, not two (swarm/supervisor.py). The child's own workers (`--processes`)
  are stopped by it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
from typing import Any

from capacity_plugins.contracts.processes import (
    PR_SET_PDEATHSIG,
    SUPERVISOR_FD_ENV,
    SUPERVISOR_PID_ENV,
    libc_prctl,
)


def _in_child(supervisor: int, prctl: Any) -> None:
    """Runs in the forked child before exec: default signal dispositions, own group, death signal.
    Nothing here may start a process or take a lock another thread could hold at the fork
    (`prctl` was looked up in the parent: contracts/processes.py)."""
    # A background job of a non-interactive shell starts with SIGINT ignored, and Locust would
    # inherit that and never stop on our forwarded SIGINT: give the child the default disposition.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # armed too late if the supervisor died since the fork: the kernel will not signal, so stop now
        if os.getppid() != supervisor:
            os.kill(os.getpid(), signal.SIGTERM)


class Child:
    """One supervised Locust process. `wait()` returns (exit code, the signal that stopped us or None)."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        read_fd, self._write_fd = os.pipe()
        env = dict(env)
        env[SUPERVISOR_FD_ENV] = str(read_fd)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        self.proc = subprocess.Popen(cmd, env=env, process_group=0,
                                     preexec_fn=functools.partial(_in_child, os.getpid(), libc_prctl()), pass_fds=(read_fd,))
        os.close(read_fd)  # only the child holds the read end; our write end dies with us
        self.signal: int | None = None

    def _forward(self, signum: int, _frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
            print("\n[capacity] stopping: in-flight requests are recorded as cancelled …", file=sys.stderr, flush=True)
            # Only the Locust master/local process: it stops its workers itself and waits for their
            # last records; signalling the workers too would make them quit before shipping those.
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
        else:  # a second Ctrl-C: stop waiting
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self) -> tuple[int, int | None]:
        old = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            rc = self.proc.wait()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
        return rc, self.signal


def run_child(cmd: list[str], env: dict[str, str]) -> tuple[int, int | None]:
    """Start Locust as a supervised child and wait for it; (exit code, the signal that stopped the run)."""
    return Child(cmd, env).wait()
