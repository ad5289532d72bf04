"""The host a load generator runs in: real OS threads beside the gevent hub, and every touch of
gevent's, libev's and geventhttpclient's internals, each with the reason the public API is not enough.

Why in one module: these are the lines an upgrade of gevent or geventhttpclient can break
underneath (a private attribute renamed, a libev method gone), and a break here does not fail
loudly: a run gets slower, or its TTFTs a decode step late. `tests/test_host_internals.py` checks
that the installed libraries still have each shape used here and that nothing else in the package
touches them; when one of them fails, fix the function named below, nothing else. Each touch has
a fallback where one exists (named at the function). It imports nothing of the project: its
layer is below every one that runs on gevent (the client, the swarm, the sinks, telemetry).

The touches:

- gevent's loop (`ILoop` is gevent's "internal, low-level interface"; the features below are
  libev's, and gevent's default loop on Linux is libev): `is_libev` (the loop's kind, from its
  type), `loop_turn` (libev's `iteration`), `feed_reads` (`closing_fd`: libev feeds the fd's
  readers), `feed_callback` (a watcher's `feed`), and `HubIdleGate` (a `prepare` watcher at
  `MINPRI`, `pendingcnt`, gevent's private callback queue `_callbacks`).
- gevent's socket: `set_read_priority` (the private read watcher `_read_event`).
- geventhttpclient: `take_body` (a response's `_body_buffer` and the parser's `_on_body`),
  `response_socket` / `replace_response_socket` (`_sock`), `response_pool` (`_pool`),
  `connection_pool` (an HTTPClient's `_connection_pool`), `override_pool` (a ConnectionPool's
  `_is_socket_alive` and `_create_tcp_socket`, on one instance).
- gevent's monkey-patching: `start_native_thread`, `real_lock` and the real sleep come from
  `gevent.monkey.get_original` (public API; here because every native thread of the package
  starts here).

The one other place is `swarm/locust_compat.py`: Locust's shutdown, heartbeat and a worker's
spawn-message parsing, worked around
where the swarm owns that behaviour, with its own shape test (`tests/test_locust_compat.py`).

Real OS threads: Locust monkey-patches `threading` on import, so `threading.Thread` becomes a
greenlet and a blocking C call in it (NVML, a slow socket read) would freeze every simulated
user. `_thread.start_new_thread` and `allocate_lock` are taken from gevent's saved originals, so
a loop runs beside the hub (`NativeLoop`), and waiting uses a real lock (a gevent Event is not
safe across OS threads).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger(__name__)


# --- gevent's loop (libev) ---------------------------------------------------------------------


def is_libev(loop: Any) -> bool:
    """Whether a gevent loop is libev's (priorities, pending counts, fed events), not libuv's.

    gevent has no public way to ask which loop it runs; the loop's type says (gevent.libev.*)."""
    return type(loop).__module__.startswith("gevent.libev")


def loop_turn(loop: Any) -> int | None:
    """How many turns the loop has run (libev's `iteration`, ev_iteration); None on a loop
    without the counter (libuv), whose callers go by time alone.

    Why: a reader that finds data waiting never enters the hub; whether the hub ran since a
    moment is this counter's change (client/stream.py `_HubShare`). gevent's ILoop has no such count."""
    return getattr(loop, "iteration", None)


def feed_reads(loop: Any, fds: Iterable[int]) -> None:
    """Queue the readers waiting on each fd to run in this loop turn, as if its poll had found
    the fd readable (libev only: call after `is_libev`).

    gevent's `closing_fd` is ILoop's "this fd is about to close" hook; libev implements it as
    ev_feed_fd_event, which feeds the fd's active watchers, and those run by priority in the
    current turn. No public API feeds an io event: client/stream.py `yield_to_first_reads` needs the
    connections whose first token waits read now, mid-turn, before the rest of the turn."""
    for fd in fds:
        loop.closing_fd(fd)


def feed_callback(loop: Any, priority: int, callback: Callable[[Any], Any]) -> None:
    """Run `callback(None)` in this loop turn at libev `priority`: after the fed readers of a
    higher priority, before everything of a lower one (libev only).

    A check watcher that is never started, fed once (a libev watcher's `feed`, ev_feed_event).
    gevent's public `run_callback` has no priority: its callbacks run before or after every
    watcher, not between the fed readers and the rest of the turn."""
    loop.check(False, priority).feed(0, callback, None)


def _nothing_queued(loop: Any) -> bool:
    """No watcher pending (libev's `pendingcnt`) and no callback queued (gevent's private
    `_callbacks`, the queue of `run_callback`): the loop is about to block in its poll.

    gevent says nowhere publicly that its hub has nothing left to run; HubIdleGate needs it."""
    return not loop.pendingcnt and not len(getattr(loop, "_callbacks", ()))


# --- gevent's socket ----------------------------------------------------------------------------


def set_read_priority(sock: Any, priority: int) -> None:
    """The libev priority of the watcher a gevent socket's receive waits on (its private
    `_read_event`); no-op on a closed socket or while a receive waits.

    gevent's sockets have no public priority: client/stream.py `_FirstReads` raises the read watcher of
    a connection whose first token is due, so a loop turn that finds many connections readable
    reads that one first. gevent on libuv ignores priorities."""
    # closed (no watcher), or waiting: a loop changes a priority only between waits (libev says
    # so with AttributeError, gevent's cffi watchers with ValueError)
    with contextlib.suppress(AttributeError, ValueError):
        sock._read_event.priority = priority


# --- geventhttpclient ---------------------------------------------------------------------------


def take_body(resp: Any) -> bytearray | None:
    """The response's body buffer, from now on extended by the HTTP parser in C with every piece
    of the body it parses; None where the response is not laid out as known here (the caller
    then reads by `readline()`, the public path).

    geventhttpclient's `_body_buffer` holds the body bytes parsed so far, and its C parser hands
    each piece to the response's `_on_body` (looked up on the instance). Its public `read()` /
    `readline()` copy and wait for whole blocks; here the reader sees each line as soon as it is
    complete, and the bound `bytearray.extend` appends without a Python frame per HTTP chunk
    (vLLM sends one per token)."""
    buf = getattr(resp, "_body_buffer", None)
    if not isinstance(buf, bytearray) or not hasattr(resp, "feed"):
        return None
    resp._on_body = buf.extend
    return buf


def response_socket(resp: Any) -> Any:
    """The connection a response reads from (geventhttpclient's `_sock`); None once released.

    A response exposes no socket: stream.py receives itself (its own block size, the kernel's
    arrival stamp) and feeds the bytes to the response's parser."""
    return getattr(resp, "_sock", None)


def replace_response_socket(resp: Any, sock: Any) -> None:
    """The response reads from, and gives back to its pool, `sock` (the same connection as a
    stamping socket, client/stream.py `_stamping`) instead of its own `_sock`."""
    resp._sock = sock


def response_pool(resp: Any) -> Any:
    """The connection pool a response returns its connection to (geventhttpclient's `_pool`);
    None when it has none (released, or not a pooled response)."""
    return getattr(resp, "_pool", None)


def connection_pool(client: Any) -> Any:
    """An HTTPClient's connection pool (its `_connection_pool`; geventhttpclient has no public
    accessor), or None: `override_pool` prepares it before its first connection."""
    return getattr(client, "_connection_pool", None)


def override_pool(pool: Any, *, is_socket_alive: Callable[[Any], bool] | None = None,
                  create_tcp_socket: Callable[[int, int, int], Any] | None = None) -> None:
    """Replace, on this ConnectionPool instance only (never the class: other pools of the
    process keep geventhttpclient's), its check of a pooled connection (`_is_socket_alive`) and
    its TCP socket factory (`_create_tcp_socket`); None leaves one as it is. Idempotent; a pool
    without either method, or without an instance dict, stays as it is.

    Both are private methods meant to be overridden by subclassing, but the pool is created
    inside geventhttpclient's HTTPClient: there is no public way to pass a subclass or a factory.
    Why each is replaced: client/stream.py `_idle_and_open` and `_stamped_tcp_socket`."""
    if pool is None:
        return
    with contextlib.suppress(AttributeError, TypeError):  # a pool without __dict__ stays as it is
        own = vars(pool)
        for name, replacement in (("_is_socket_alive", is_socket_alive), ("_create_tcp_socket", create_tcp_socket)):
            if replacement is not None and hasattr(type(pool), name) and own.get(name) is not replacement:
                setattr(pool, name, replacement)


# --- real OS threads beside the hub ------------------------------------------------------------


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
    pending and neither would ever open. Threads waiting at once go through one per idle turn,
    and one's wait ending never closes the gate on another (the hub's gate is shared: a process
    with more than one records sink, as a test process has, had a waiter stranded until its
    timeout by another thread's short wait ending).
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
        self._waiters: set[object] = set()  # one token per wait() under way (add / discard: atomic)
        self._opened = False  # released for a waiter, not taken yet: one opening at a time
        self._loop = loop
        if loop is not None and is_libev(loop):  # libev can say what is pending; libuv's always says 0
            # after gevent's own prepare watcher, which runs the queued callbacks
            watcher = loop.prepare(ref=False, priority=loop.MINPRI)
            watcher.start(self._before_poll)
            self._watcher = watcher  # a stopped-by-GC watcher would never fire

    @property
    def waiting(self) -> bool:
        """Whether a thread waits here now."""
        return bool(self._waiters)

    def _before_poll(self) -> None:
        if self._waiters and not self._opened and _nothing_queued(self._loop):
            self._opened = True
            with contextlib.suppress(RuntimeError):  # still open: a waiter had timed out before
                self._lock.release()

    def wait(self, timeout_s: float) -> None:
        """Block this native thread until the hub is next about to block, or `timeout_s`."""
        token = object()
        self._waiters.add(token)
        try:
            if self._lock.acquire(timeout=timeout_s):
                self._opened = False  # this wait took the opening (or one a timed-out wait left)
        finally:
            self._waiters.discard(token)


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
