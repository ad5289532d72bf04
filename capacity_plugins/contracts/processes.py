"""What a supervisor and the process it starts agree on: the environment `capacity run` hands the
Locust process, and the kernel's parent-death signal (`capacity run`, the matrix's servers)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable
from typing import Final

# The read end of a pipe only the supervisor writes to: EOF means the supervisor is gone.
SUPERVISOR_FD_ENV: Final = "CAPACITY_SUPERVISOR_FD"
# The supervisor's pid: only its direct child acts on the EOF (forked workers leave it to their master).
SUPERVISOR_PID_ENV: Final = "CAPACITY_SUPERVISOR_PID"

PR_SET_PDEATHSIG: Final = 1
PR_GET_PDEATHSIG: Final = 2


@functools.cache
def libc_prctl() -> Callable[..., int] | None:
    """libc's `prctl` (Linux; None elsewhere or if libc cannot be loaded). Look it up before a fork
    and hand the function to the child's preexec: `find_library` runs `ldconfig` in a subprocess,
    which must never happen between fork and exec — with gevent's patched subprocess (a test
    process) the forked child hung there, and its parent waited on it for ever."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl
