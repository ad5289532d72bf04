"""Open-loop arrival schedules, and the pacer that makes users send on them.

One *global* schedule per step is generated from (seed, step index) — identical in every
process — and worker k of n takes arrivals k, k+n, k+2n, … So the swarm as a whole offers exactly
the target rate (not n× it), and the master can count the arrivals actually offered in a window
without asking the workers. Times are offsets (seconds) from the step's start on an absolute
timeline: a late send never shifts the ones after it (no drift, no coordinated omission).

Gamma inter-arrivals follow vLLM's `--burstiness`: shape k = 1/cv², scale = 1/(rate·k), so the
mean stays 1/rate and cv = 1 is Poisson.

The pacer half imports gevent lazily so that the schedule maths stays importable (and testable)
without a Locust process.
"""

from __future__ import annotations

import math
import random
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from capacity_plugins.contracts.percentiles import quantile

ArrivalKind = Literal["poisson", "gamma", "constant"]


def _unit_renewal(kind: ArrivalKind, cv: float, horizon: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a unit-rate renewal process in [0, horizon)."""
    if horizon <= 0:
        return np.empty(0)
    if kind == "constant":
        return np.arange(0.0, horizon, 1.0)
    if kind == "poisson" or (kind == "gamma" and cv == 1.0):
        draw: Callable[[int], np.ndarray] = lambda n: rng.exponential(1.0, n)  # noqa: E731
    elif kind == "gamma":
        shape = 1.0 / (cv * cv)
        draw = lambda n: rng.gamma(shape, 1.0 / shape, n)  # noqa: E731
    else:  # pragma: no cover - the scenario model only lets the three kinds through
        raise ValueError(f"unknown arrival kind {kind!r}")
    chunks: list[np.ndarray] = []
    t = 0.0
    # Draw in chunks sized to the expected count; a few extra draws are cheap, a Python loop is not.
    n = int(horizon * 1.1) + 16
    while t < horizon:
        gaps = draw(n)
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    out = np.concatenate(chunks)
    return out[out < horizon]


def schedule(
    kind: ArrivalKind,
    rate: float,
    duration_s: float,
    *,
    cv: float = 1.0,
    seed: int = 0,
    step: int = 0,
    ramp_s: float = 0.0,
) -> np.ndarray:
    """Offsets (s from the step start, ascending, all < duration_s) of one step's global schedule.

    With `ramp_s` > 0 the rate rises linearly from 0 to `rate` over the first ramp_s seconds and then
    holds (peak rehearsal): a unit-rate process is generated in "operational time" Λ(t) (the expected
    count by t) and mapped back through Λ⁻¹, which keeps the chosen arrival kind and cv.
    """
    if rate <= 0 or duration_s <= 0:
        return np.empty(0)
    # A seed per (scenario seed, step): reruns are reproducible and steps are independent.
    rng = np.random.default_rng([seed, step])
    ramp_s = min(max(ramp_s, 0.0), duration_s)
    total = rate * (duration_s - ramp_s / 2.0)  # Λ(duration_s)
    unit = _unit_renewal(kind, cv, total, rng)
    if ramp_s == 0:
        return unit / rate
    ramp_mass = rate * ramp_s / 2.0  # Λ(ramp_s)
    in_ramp = unit < ramp_mass
    out = np.empty_like(unit)
    # Λ(t) = rate·t²/(2·ramp_s) on the ramp → t = sqrt(2·ramp_s·u/rate)
    out[in_ramp] = np.sqrt(2.0 * ramp_s * unit[in_ramp] / rate)
    out[~in_ramp] = ramp_s + (unit[~in_ramp] - ramp_mass) / rate
    return out


@dataclass(frozen=True)
class ArrivalPlan:
    """The parameters of one open-loop step's global schedule: every process that has them
    (the master, each worker) generates the same arrivals with `schedule(step_index)`."""

    arrival: ArrivalKind
    rate: float
    duration_s: float
    cv: float = 1.0
    seed: int = 0
    ramp_s: float = 0.0
    # Trace replay: the window's arrivals themselves (offsets, s from the step's start, ascending)
    # and, per arrival, the request it sends (corpus.trace.request_payload). Shipped to workers
    # whole, so a worker needs no copy of the trace file.
    offsets: tuple[float, ...] | list[float] | None = None
    requests: tuple[Any, ...] | list[Any] | None = None
    block_tokens: int = 0
    # Multi-turn sessions: a session's turns all go to one process (corpus.trace.session_shard).
    sessions: bool = False

    def schedule(self, step: int) -> np.ndarray:
        if self.offsets is not None:
            return np.asarray(self.offsets, dtype=float)
        return schedule(self.arrival, self.rate, self.duration_s, cv=self.cv, seed=self.seed, step=step,
                        ramp_s=self.ramp_s)


def shard(offsets: np.ndarray, index: int, count: int) -> np.ndarray:
    """Worker `index` of `count` takes arrivals index, index+count, …: an exact partition."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index} of {count} does not exist")
    return offsets[index::count]


def offered_in_window(offsets: np.ndarray, start: float, end: float) -> int:
    """Arrivals scheduled in [start, end) (offsets relative to the same origin)."""
    return int(np.searchsorted(offsets, end, side="left") - np.searchsorted(offsets, start, side="left"))


# ---------------------------------------------------------------------------------------------------------
# Pacer: the seam LLMUser calls (`environment.capacity.pacer.wait_next()`).


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

    def __init__(self, clock: Callable[[], float] = time.time, idle_poll_s: float = 0.25,
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
            if due >= self.end_unix:
                return  # the window has closed (or will have by then): no more arrivals
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
