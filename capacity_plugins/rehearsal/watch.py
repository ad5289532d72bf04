"""A generator process watching itself: CPU and memory, and how late its own event loop runs.

CPU comes from a native-thread sampler (telemetry/client.py), so a busy hub cannot delay its own
measurement. CPU alone misses the worst case, though: a process the kernel does not schedule (it
shares cores with a busy server in another scheduling group, or it is paused) shows *low* CPU
while every timestamp it takes is late. The loop-lag ticker sees that directly: a greenlet asks to
wake every `TICK_S` and records how late it actually woke. A starved or blocked process wakes
late whatever the cause, so lag is the validity signal; CPU says why.

One `SelfWatch` per generator process (local runner or worker), shared by the steps accounting
(steps.json) and the live view.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import gevent

from capacity_plugins.contracts.clock import master_time

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0
# 20 Hz: a lag sample every 50 ms costs nothing measurable and catches stalls of a few tens of ms.
TICK_S = 0.05
_MAX_LAG_SAMPLES = 20 * 3600  # an hour of ticks; older ones have been reported already


class LoopLagTicker:
    """How late this process's gevent hub wakes a sleeping greenlet (ms), sampled every TICK_S."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.samples: deque[tuple[float, float]] = deque(maxlen=_MAX_LAG_SAMPLES)
        self._greenlet: Any = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        perf = time.perf_counter
        while True:
            due = perf() + self.tick_s
            gevent.sleep(self.tick_s)
            now = perf()
            self.samples.append((master_time(), max(0.0, (now - due) * 1000.0)))

    def since(self, unix: float) -> list[tuple[float, float]]:
        return [s for s in self.samples if s[0] > unix]


class SelfWatch:
    """CPU %, RSS and loop lag of this process, handed out as 'what is new since the last call'."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ticker = LoopLagTicker()
        self._last_cpu = 0.0
        self._last_lag = 0.0
        from capacity_plugins.telemetry.client import ClientSampler

        self.sampler = ClientSampler(interval_s=WATCH_INTERVAL_S, device=name)

    def start(self) -> None:
        self.sampler.start()
        self.ticker.start()

    def stop(self) -> None:
        self.sampler.stop()
        self.ticker.stop()

    def new_cpu(self) -> list[tuple[float, float, float | None]]:
        """(unix, cpu %, RSS bytes) samples since the last call."""
        out = [
            (s["unix"], s["cpu_pct"], s.get("rss_bytes"))
            for s in self.sampler.samples_since(self._last_cpu)
            if s["unix"] > self._last_cpu
        ]
        if out:
            self._last_cpu = out[-1][0]
        return out

    def new_lag(self) -> list[tuple[float, float]]:
        """(unix, loop lag ms) ticks since the last call."""
        out = self.ticker.since(self._last_lag)
        if out:
            self._last_lag = out[-1][0]
        return out
