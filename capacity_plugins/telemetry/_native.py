"""A periodic loop in a real OS thread, whether or not gevent has patched the process.

Locust monkey-patches `threading` on import, so `threading.Thread` becomes a greenlet and a
blocking C call in it (NVML, a slow socket read) would freeze every simulated user.
`_thread.start_new_thread` and `allocate_lock` are taken from gevent's saved originals, so the
loop runs beside the hub, and waiting uses a real lock (a gevent Event is not safe across OS
threads).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


def _original(name: str, module: str = "_thread") -> Any:
    try:
        from gevent import monkey

        return monkey.get_original(module, name)
    except ImportError:  # pragma: no cover - gevent is a dependency, but keep the module usable alone
        import importlib

        return getattr(importlib.import_module(module), name)


_real_sleep = _original("sleep", "time")  # a patched time.sleep would switch greenlets, not wait


def start_native_thread(target: Callable[[], None]) -> None:
    """Run `target` in a real OS thread (it may block in C without stopping the gevent hub)."""
    _original("start_new_thread")(target, ())


def real_lock() -> Any:
    """A lock that blocks the OS thread, not a greenlet."""
    return _original("allocate_lock")()


def no_share() -> None:
    """GilShare's stand-in where the work runs on the caller's thread (nothing to share with)."""


def is_libev(loop: Any) -> bool:
    """Whether a gevent loop is libev's (pending counts, fed events), not libuv's."""
    return type(loop).__module__.startswith("gevent.libev")


class HubIdleGate:
    """Opened by the gevent hub each time it is about to block with nothing left to run.

    GilShare waits here between its slices: the next slice then starts while the hub has nothing
    to do, instead of at a random moment of its busiest stretch. Why: on a worker near its limit
    the hub's work comes in bursts (a server's decode step writes every stream at once), and a
    slice that lands inside a burst delays the burst's last first-token reads by the slice. At
    75 % of a core, 8 streams, 1 ms steps: 0.81 % of first tokens a step late ungated, 0.59 %
    gated (medians of 6 paired rounds, gated fewer in each), 0.06 % with no writer at all.

    The hub side is a prepare watcher at libev's lowest priority: it runs just before the loop
    polls, after gevent's own (which runs queued callbacks), so nothing pending and no callback
    queued means the poll will block. A hub that never gets there leaves the waiter to its
    timeout. libuv loops (and a process without a hub) never open it: GilShare then paces by
    the timeout alone. The watcher does not keep the loop alive and costs one check per loop
    turn, so it is never stopped; and there is one per hub (`of_this_hub`, called on the hub's
    thread: libev is not thread-safe): two at the lowest priority would each see the other
    pending and neither would ever open. A second thread waiting at once waits its timeout.
    """

    _by_loop: dict[int, HubIdleGate] = {}

    @classmethod
    def of_this_hub(cls) -> HubIdleGate:
        try:
            import gevent

            loop: Any = gevent.get_hub().loop
        except ImportError:  # pragma: no cover - gevent is a dependency
            return cls(None)
        gate = cls._by_loop.get(id(loop))
        if gate is None or gate._loop is not loop:
            gate = cls._by_loop[id(loop)] = cls(loop)
        return gate

    def __init__(self, loop: Any) -> None:
        self._lock = real_lock()
        self._lock.acquire()  # closed: wait() blocks until the hub opens it
        self._waiting = False
        self._loop = loop
        if loop is not None and is_libev(loop):  # libev can say what is pending; libuv's always says 0
            watcher = loop.prepare(ref=False, priority=loop.MINPRI)
            watcher.start(self._before_poll)
            self._watcher = watcher  # a stopped-by-GC watcher would never fire

    def _before_poll(self) -> None:
        loop = self._loop
        if self._waiting and not loop.pendingcnt and not len(getattr(loop, "_callbacks", ())):
            self._waiting = False
            with contextlib.suppress(RuntimeError):  # still open: a waiter had timed out before
                self._lock.release()

    def wait(self, timeout_s: float) -> None:
        """Block this native thread until the hub is next about to block, or `timeout_s`."""
        self._waiting = True
        self._lock.acquire(timeout=timeout_s)
        self._waiting = False


class GilShare:
    """Call between small pieces of CPU work in a native thread beside the gevent hub: after
    `SLICE_S` of work it pauses (the GIL goes to the hub) until the hub is next idle (`gate`,
    HubIdleGate) or `PAUSE_S` at most, so the work takes at most ~5 % of a busy core until
    `polite_s` after it began, then runs unpaced.

    Why: a thread holding the GIL keeps it until the hub's next system call (one per receive, so
    a writer that wants the GIL gets it at once) or the interpreter's 5 ms switch interval; on a
    worker's one core, what the writer runs the hub does not — whether it holds the GIL or not
    (a copy into the page cache in C still takes the core). The records writer's flush (~40 µs
    a streamed record: 8 ms for the 180 records of a quarter second at 80 % of a worker's ingest)
    held first-token reads past the server's next decode step, whose write the kernel merges
    into the first (the stamp becomes the later write's: TTFT a step late). Cut into 0.2 ms
    slices with 50 µs pauses it still took ~80 % of the core while it ran. Probing whether the
    hub was idle (its thread's CPU clock, every 0.2 ms) was worse: each probe is a wakeup and a
    GIL handover; the gate is told by the hub instead. The bound keeps the durability promise: a
    worker so busy that the writer's 5 % is not enough gets its records written late by at most
    `polite_s`. Past it the work runs unpaced: on a saturated worker timing is lost anyway (the
    analysis flags the step client-limited), and a short pause per slice there cost the writer
    ~20 % more in switches."""

    SLICE_S = 0.0001
    PAUSE_S = 0.002

    __slots__ = ("_deadline_ns", "_pause", "_since")

    def __init__(self, polite_s: float, gate: HubIdleGate | None = None) -> None:
        self._since = time.perf_counter_ns()
        self._deadline_ns = self._since + int(polite_s * 1e9)
        self._pause = gate.wait if gate is not None else _real_sleep

    def __call__(self) -> None:
        now = time.perf_counter_ns()
        if now - self._since >= self.SLICE_S * 1e9 and now < self._deadline_ns:
            self._pause(self.PAUSE_S)
            self._since = time.perf_counter_ns()


class NativeLoop:
    """Call `tick()` every `interval_s` in a native thread until `stop()`; `final()` runs once at the end.

    Ticks are scheduled on a fixed grid (start + k·interval) so a slow tick does not make the
    series drift; a tick that overruns skips the missed slots instead of bursting.
    """

    def __init__(self, name: str, interval_s: float, tick: Callable[[], None],
                 final: Callable[[], None] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval_s must be > 0, got {interval_s}")
        self.name = name
        self.interval_s = float(interval_s)
        self._tick = tick
        self._final = final
        self._wake = real_lock()
        self._wake.acquire()  # held until stop(): acquire(timeout) below is an interruptible sleep
        self._done = real_lock()
        self._started = False
        self._stopping = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._done.acquire()
        _original("start_new_thread")(self._run, ())

    def _run(self) -> None:
        try:
            t0 = time.monotonic()
            k = 0
            while not self._stopping:
                try:
                    self._tick()
                except Exception:  # one bad tick must not end the loop
                    logger.exception("%s: tick failed", self.name)
                k = max(k + 1, int((time.monotonic() - t0) / self.interval_s) + 1)
                delay = t0 + k * self.interval_s - time.monotonic()
                if delay > 0 and self._wake.acquire(timeout=delay):
                    break
            if self._final is not None:
                try:
                    self._final()
                except Exception:
                    logger.exception("%s: final step failed", self.name)
        finally:
            self._done.release()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the loop to end and wait for its final step; True when it ended within the timeout."""
        self.request_stop()
        return self.wait(timeout_s)

    def request_stop(self) -> None:
        """Ask the loop to end without waiting (stop several loops at once, then `wait()` each)."""
        if self._started and not self._stopping:
            self._stopping = True
            self._wake.release()

    def wait(self, timeout_s: float = 10.0) -> bool:
        """Wait for the loop's final step; True when it ended within the timeout.

        Waits by polling with `time.sleep`, which is gevent's sleep in a patched process, so the
        hub keeps serving other greenlets while the final scrape/flush runs.
        """
        if not self._started:
            return True
        deadline = time.monotonic() + timeout_s
        while not self._done.acquire(False):
            if time.monotonic() > deadline:
                logger.warning("%s: did not stop within %.1f s", self.name, timeout_s)
                return False
            time.sleep(0.01)
        self._done.release()
        return True
