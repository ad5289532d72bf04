"""The child side of `capacity run`'s supervision: stop the run when the supervisor is gone.

`capacity run` starts Locust with the read end of a pipe (contracts/processes.py); it never
writes, so the read returns EOF exactly when `capacity run` has died, whatever killed it. A
native thread blocks on that read and then sends this process SIGTERM, which stops the test the
clean way (in-flight requests recorded as cancelled, files written, workers told to quit). Only
the supervisor's direct child watches: Locust's own forked workers are stopped by their master.
On Linux the kernel's parent-death signal (runner/child.py) usually gets there first; this is
the portable path, and the one that also covers a supervisor killed between fork and exec.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

from capacity_plugins.contracts.processes import SUPERVISOR_FD_ENV, SUPERVISOR_PID_ENV
from capacity_plugins.telemetry._native import start_native_thread

log = logging.getLogger(__name__)

_watching = False


def watch_supervisor() -> bool:
    """Start the watchdog when this process was started by `capacity run`; True if it runs."""
    global _watching
    fd_text, pid_text = os.environ.get(SUPERVISOR_FD_ENV), os.environ.get(SUPERVISOR_PID_ENV)
    if _watching or not fd_text or not pid_text:
        return False
    try:
        fd, supervisor = int(fd_text), int(pid_text)
    except ValueError:
        return False
    if os.getppid() != supervisor:
        return False  # a worker Locust forked (--processes): its master stops it
    _watching = True

    def wait_for_eof() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 64):
                pass
        log.warning("capacity run (pid %d) is gone: stopping this run", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)

    start_native_thread(wait_for_eof)
    return True
