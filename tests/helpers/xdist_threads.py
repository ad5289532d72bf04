"""pytest-xdist workers that survive Locust's gevent monkey-patching (conftest.py calls this first).

An xdist worker is an execnet gateway: a real OS thread reads the controller's commands and hands
each test to the main thread through a queue guarded by `execmodel.RLock()` / `execmodel.Event()`
(xdist/remote.py's TestQueue). conftest.py then imports Locust, which patches `threading`; the
queue, created after that, gets gevent's lock and event, and the main thread waiting on a gevent
event that only an OS thread will set finds nothing to run and dies with `gevent.exceptions.
LoopExit` before its first test. Here, in a worker only, the gateway's execmodel hands out
primitives built on the interpreter's own locks (`gevent.monkey.get_original`), which block the
main thread until the reader thread sets them, as they would without gevent.

The controller needs nothing: it imports Locust before it starts any gateway, so its execnet
threads are greenlets and its queues gevent's, consistently. `tests/test_suite_parallel.py` runs a
two-worker session: it fails when execnet or xdist change what this relies on.
"""

from __future__ import annotations

import os
from typing import Any


def keep_worker_on_os_threads() -> None:
    """In an xdist worker (PYTEST_XDIST_WORKER set), make its execnet primitives OS-thread ones."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from execnet.gateway_base import MainThreadOnlyExecModel
    from gevent.monkey import get_original

    allocate_lock = get_original("_thread", "allocate_lock")
    os_rlock = get_original("_thread", "RLock")

    class OSThreadEvent:
        """threading.Event on unpatched locks: each waiter blocks on a lock of its own that set()
        releases (the shape of CPython's Condition, without the module globals gevent replaces)."""

        def __init__(self) -> None:
            self._mutex = allocate_lock()
            self._waiters: list[Any] = []
            self._flag = False

        def is_set(self) -> bool:
            return self._flag

        def set(self) -> None:
            with self._mutex:
                self._flag = True
                for waiter in self._waiters:
                    waiter.release()
                self._waiters.clear()

        def clear(self) -> None:
            with self._mutex:
                self._flag = False

        def wait(self, timeout: float | None = None) -> bool:
            with self._mutex:
                if self._flag:
                    return True
                waiter = allocate_lock()
                waiter.acquire()
                self._waiters.append(waiter)
            if waiter.acquire(True, -1 if timeout is None else timeout):
                return True
            with self._mutex:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                return self._flag

    # Only execnet's thread model for xdist: the gateway's own objects (made before the patch) and
    # everything the tests create are left alone.
    MainThreadOnlyExecModel.Lock = lambda self: os_rlock()  # type: ignore[method-assign]
    MainThreadOnlyExecModel.RLock = lambda self: os_rlock()  # type: ignore[method-assign]
    MainThreadOnlyExecModel.Event = lambda self: OSThreadEvent()  # type: ignore[method-assign]
