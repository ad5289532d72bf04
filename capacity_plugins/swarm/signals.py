"""Ctrl-C and SIGTERM land in the main greenlet, where Locust handles a stop — once.

With Python's default SIGINT handler, KeyboardInterrupt is raised in whichever greenlet happens to
be running: a user mid-request (its record lost), the progress printer or a web UI response being
sent (a traceback). Through gevent's hub the signal becomes one KeyboardInterrupt thrown into the
greenlet that fired Locust's `init` event — the main one, which Locust's main() waits in and
handles (stop users, quit, write everything).

A SIGTERM asks for that same clean stop, so once a stop is under way a further SIGTERM is
ignored: thrown again, it would interrupt the clean stop itself (the master waiting for its
workers' last records) and end the process with a traceback, records lost and workers left
running. A process can get two SIGTERMs that do not coalesce — `capacity run` killed, with the
kernel's parent-death signal and another sender (an orchestrator, a user's `kill`) — and
Locust's own SIGTERM handler, installed once a headless shape run has ended, would start a second
shutdown beside the first; so at the stop SIGTERM is set to be ignored for the rest of the
process (`ignore_sigterm`, also called at `quitting`). A second Ctrl-C still interrupts: a person
who presses it again means it (`capacity run` turns it into SIGKILL).
"""

from __future__ import annotations

import contextlib
import logging
import signal

import gevent
import greenlet

log = logging.getLogger(__name__)

_routed: set[int] = set()
_stopping = False  # a routed signal has started the clean stop


def stopping() -> bool:
    """True once a Ctrl-C or SIGTERM routed here has started the clean stop."""
    return _stopping


def ignore_sigterm() -> None:
    """From now on SIGTERM does nothing in this process (a stop is under way or done). Only the
    main thread can change a disposition; elsewhere (library use) nothing changes."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def shutting_down(**_: object) -> None:
    """A `quitting` listener: the process is shutting down, so a SIGTERM routed here is ignored from
    now on (else Locust's own handler would start a second shutdown beside this one)."""
    if signal.SIGTERM in _routed:
        ignore_sigterm()


def route_to_main_greenlet(*, sigterm: bool = False) -> None:
    """Route SIGINT (and SIGTERM when asked) to the current greenlet; once per signal and process.

    SIGINT is left alone when something else already handles it (Locust's --processes parent
    forwards it to its children). SIGTERM only on request: Locust installs its own handler except
    while a headless shape run is in progress (see rehearsal).
    """
    main = greenlet.getcurrent()

    def interrupt(signum: int) -> None:
        global _stopping
        if main.dead:
            return
        if signum == signal.SIGTERM and _stopping:
            log.info("SIGTERM again while the run stops: the clean stop goes on")
            return
        first = not _stopping
        _stopping = True
        if first:
            ignore_sigterm()
        main.throw(KeyboardInterrupt)

    wanted = [signal.SIGINT] + ([signal.SIGTERM] if sigterm else [])
    with contextlib.suppress(ValueError):  # not the main thread (library use): leave signals alone
        for sig in wanted:
            if sig in _routed:
                continue
            if sig == signal.SIGINT and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                continue
            gevent.signal_handler(sig, interrupt, sig)
            _routed.add(sig)
