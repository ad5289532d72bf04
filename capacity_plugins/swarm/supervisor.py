"""The child side of `capacity run`'s supervision: stop the run when the supervisor is gone.

`capacity run` starts Locust with the read end of a pipe (contracts/processes.py); it never
writes, so the read returns EOF exactly when `capacity run` has died, whatever killed it. A
native thread blocks on that read and then sends this process SIGTERM, which stops the test the
clean way (in-flight requests recorded as cancelled, files written, workers told to quit). Only
the supervisor's direct child watches: Locust's own forked workers are stopped by their master.

On Linux the kernel's parent-death signal (runner/child.py) sends that SIGTERM itself, at the same
moment; the watchdog then only says why the run stops and sends nothing. Both sending was the
bug: two SIGTERMs that did not coalesce, the second thrown into the clean stop the first had
started (swarm/signals.py now ignores it too). The watchdog is the path where there is no
parent-death signal (other systems, or one not armed).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal

from capacity_plugins.contracts.processes import (
    PR_GET_PDEATHSIG,
    SUPERVISOR_FD_ENV,
    SUPERVISOR_PID_ENV,
    libc_prctl,
)
from capacity_plugins.host import start_native_thread

log = logging.getLogger(__name__)

_watching = False


def parent_death_signal() -> int:
    """The signal the kernel sends this process when its parent dies (Linux prctl), 0 if none."""
    prctl = libc_prctl()
    value = ctypes.c_int(0)
    if prctl is not None and prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) == 0:
        return int(value.value)
    return 0


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
    # Armed while the supervisor is our parent (just checked): its death is signalled by the kernel.
    kernel_signals = parent_death_signal() == signal.SIGTERM

    def wait_for_eof() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 64):
                pass
        log.warning("capacity run (pid %d) is gone: stopping this run", supervisor)
        if not kernel_signals:
            os.kill(os.getpid(), signal.SIGTERM)

    start_native_thread(wait_for_eof)
    return True
