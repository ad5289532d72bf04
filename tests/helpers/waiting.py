"""Poll until something holds, on one clock (time.monotonic)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

# What a poll may raise while the thing it waits for is not there yet.
NOT_YET = (OSError, AssertionError, ValueError, KeyError)


class Watched(Protocol):
    """Something running that a wait should not outlive (helpers.processes.LoggedProcess, ...)."""

    def died(self) -> str | None:
        """None while it runs; once it has ended, why (with its log's tail)."""

    def tail(self) -> str:
        """What to show when the wait times out (a log's tail)."""


def wait_until(fn: Callable[[], Any], timeout: float, what: str, watch: Watched | None = None, *,
               interval: float = 0.25) -> Any:
    """Poll fn() until it returns something truthy and return that.

    A poll raising one of NOT_YET counts as "not yet". With `watch`, the wait fails at once when
    the watched process dies, and a timeout shows its log's tail. Raises AssertionError naming
    `what` and the last error a poll raised.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        if watch is not None and (dead := watch.died()) is not None:
            raise AssertionError(f"{dead}\n(while waiting for {what})")
        try:
            value = fn()
            if value:
                return value
        except NOT_YET as e:
            last_exc = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    tail = f"\n{watch.tail()}" if watch is not None else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last error: {last_exc!r}){tail}")
