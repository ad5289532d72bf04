"""Ctrl-C and SIGTERM land in the main greenlet, where Locust handles a stop.

With Python's default SIGINT handler, KeyboardInterrupt is raised in whichever greenlet happens to
be running: a user mid-request (its record lost), the progress printer or a web UI response being
sent (a traceback). Through gevent's hub the signal becomes one KeyboardInterrupt thrown into the
greenlet that fired Locust's `init` event — the main one, which Locust's main() waits in and
handles (stop users, quit, write everything).
"""

from __future__ import annotations

import contextlib
import signal

import gevent
import greenlet

_routed: set[int] = set()


def route_to_main_greenlet(*, sigterm: bool = False) -> None:
    """Route SIGINT (and SIGTERM when asked) to the current greenlet; once per signal and process.

    SIGINT is left alone when something else already handles it (Locust's --processes parent
    forwards it to its children). SIGTERM only on request: Locust installs its own handler except
    while a headless shape run is in progress (see rehearsal).
    """
    main = greenlet.getcurrent()

    def interrupt() -> None:
        if not main.dead:
            main.throw(KeyboardInterrupt)

    wanted = [signal.SIGINT] + ([signal.SIGTERM] if sigterm else [])
    with contextlib.suppress(ValueError):  # not the main thread (library use): leave signals alone
        for sig in wanted:
            if sig in _routed:
                continue
            if sig == signal.SIGINT and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                continue
            gevent.signal_handler(sig, interrupt)
            _routed.add(sig)
