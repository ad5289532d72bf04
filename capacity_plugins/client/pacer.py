"""The pacer: the gate a user waits at for its next scheduled send in an open loop — the seam LLMUser
calls (`RequestSource.pacer`, rehearsal/source.py).

The rehearsal (rehearsal/generator.py) hands it this process's share of each step's schedule
(rehearsal/arrivals.py); users only wait. Like the backoff, it is one per process and sits in
front of every send. gevent is imported lazily, so the module stays importable without a Locust
process.
"""

from __future__ import annotations

import math
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capacity_plugins.contracts.clock import master_time
from capacity_plugins.contracts.percentiles import quantile


@dataclass
class PacerStats:
    """What one process's pacer saw during one step (shipped to the master for steps.json)."""

    scheduled: int = 0
    # Arrivals that came due while every user of this process was busy: the cap held them back.
    cap_hits: int = 0
    # Arrivals dropped because the process was backing off from a server refusing connections.
    backoff_skips: int = 0
    # How late the dispatcher woke for each due arrival (ms): event-loop / CPU lag, cap excluded.
    dispatch_lag_ms: list[float] = field(default_factory=list)

    def as_message(self) -> dict[str, Any]:
        lags = self.dispatch_lag_ms
        return {
            "scheduled": self.scheduled,
            "cap_hits": self.cap_hits,
            "backoff_skips": self.backoff_skips,
            "dispatch_lag_p99_ms": quantile(lags, 0.99),
        }


class Pacer:
    """Hands this process's share of the schedule to idle users at the scheduled instants.

    A dispatcher greenlet sleeps until each arrival is due and puts it on a queue; users block in
    `wait_next()` on that queue. When an arrival comes due and no user is waiting (all are busy with
    requests, i.e. the max_concurrency cap binds), it is counted as a cap hit and queued: the next free
    user sends it late, and its record keeps the scheduled time, so the wait shows in
    ttft_from_schedule_ms instead of vanishing (no coordinated omission).
    """

    def __init__(self, clock: Callable[[], float] = master_time, idle_poll_s: float = 0.25,
                 paused_until: Callable[[], float] = lambda: 0.0) -> None:
        import gevent.queue

        self._clock = clock
        self._idle_poll_s = idle_poll_s
        # Until when the process backs off (client/backoff.py): arrivals due before then are dropped.
        self._paused_until = paused_until
        self._queue: gevent.queue.Queue[tuple[float, int]] = gevent.queue.Queue()
        self._waiting = 0
        self._busy: weakref.WeakSet[Any] = weakref.WeakSet()
        self._dispatcher: Any = None
        self.step: int | None = None
        self.end_unix = math.inf
        self.stats: dict[int, PacerStats] = {}
        # Trace replay: the request of each arrival of this process's shard (None: the corpus decides).
        self.requests: list[Any] | None = None

    # -- called by the rehearsal wiring -----------------------------------------------------------------
    def begin(self, step: int, start_unix: float, offsets: np.ndarray, measure_from_unix: float | None = None,
              end_unix: float = math.inf, requests: list[Any] | None = None) -> None:
        """Start dispatching `offsets` (this process's shard, seconds after start_unix).

        Counters (scheduled, cap hits, lag) cover arrivals due from `measure_from_unix` (the end of
        the step's warmup) on: users still starting up during warmup are not a generator limit.
        Nothing is handed out at or after `end_unix` (the window's end; `extend` moves it): no
        request starts in a drain, even one that waited in the queue.
        """
        import gevent

        self.stop()
        self.step = step
        self.end_unix = end_unix
        self.requests = requests
        st = self.stats.setdefault(step, PacerStats())
        since = start_unix if measure_from_unix is None else measure_from_unix
        self._dispatcher = gevent.spawn(self._dispatch, start_unix, np.asarray(offsets, dtype=float), st, since)

    def extend(self, end_unix: float) -> None:
        """The window runs longer (the step is short of measured requests)."""
        self.end_unix = end_unix

    def stop(self) -> None:
        """No further arrivals; queued ones are dropped (they were never sent, so never offered to the server)."""
        if self._dispatcher is not None:
            self._dispatcher.kill(block=False)
            self._dispatcher = None
        while not self._queue.empty():
            self._queue.get_nowait()
        self.step = None

    def _dispatch(self, start_unix: float, offsets: np.ndarray, st: PacerStats, since: float) -> None:
        import gevent

        for i, off in enumerate(offsets):
            due = start_unix + float(off)
            # An arrival past the window's end waits for the end itself: until then the window may
            # still be extended (min_requests), and giving up early stopped a step's arrivals at a
            # quiet gap before its end, however long it then ran on.
            while due >= self.end_unix:
                left = self.end_unix - self._clock()
                if left <= 0:
                    return  # the window has closed: no more arrivals
                gevent.sleep(left)
            delay = due - self._clock()
            if delay > 0:
                gevent.sleep(delay)
            if self._paused_until() > due:
                if due >= since:
                    st.backoff_skips += 1
                continue
            if due >= since:
                st.scheduled += 1
                st.dispatch_lag_ms.append(max(0.0, (self._clock() - due) * 1000.0))
                if self._waiting <= self._queue.qsize():
                    st.cap_hits += 1
            self._queue.put((due, i))

    # -- called by users ---------------------------------------------------------------------------------
    def wait_next(self) -> float | None:
        """Block until this user's next arrival; its scheduled Unix time, or None when nothing is due."""
        got = self.wait_arrival()
        return None if got is None else got[0]

    def wait_arrival(self) -> tuple[float, Any] | None:
        """Like wait_next, with the arrival's trace request (None when the corpus decides what to send)."""
        import gevent
        import gevent.queue

        me = gevent.getcurrent()
        self._busy.discard(me)
        self._waiting += 1
        try:
            # A jittered poll: a pool started at once would otherwise time out and nap in step,
            # leaving moments where no idle user waits and an arrival counts as a cap hit.
            due, i = self._queue.get(timeout=self._idle_poll_s * (0.5 + random.random()))
        except gevent.queue.Empty:
            return None
        finally:
            self._waiting -= 1
        if self._clock() >= self.end_unix:
            return None  # queued before the window closed, but a request must not start in a drain
        self._busy.add(me)
        reqs = self.requests
        return due, (reqs[i] if reqs is not None and i < len(reqs) else None)

    def release(self) -> None:
        """The calling user's request is done: it holds no arrival any more. (Without this, a user
        that finished during a drain — it takes no new arrival there — counted as in flight until
        the drain timed out.)"""
        import gevent

        self._busy.discard(gevent.getcurrent())

    @property
    def in_flight(self) -> int:
        """Users that took an arrival and have not come back for the next one (their request is running)."""
        return sum(1 for g in list(self._busy) if not getattr(g, "dead", False))
