"""Each worker's clock offset to its master's, measured NTP-style and corrected on the worker.

Hosts' clocks differ: a worker whose clock ran 5 s ahead wrote every send time 5 s off, tagged
its records to the wrong steps and ended its windows 5 s early, and nothing said so. Locust
measures nothing of it (its check of a worker's clock is commented out in `client_ready`).

The master sends `ClockPing` (its send time t0) at a worker's Hello and Ready and every
`CLOCK_INTERVAL_S` after; the worker answers at once with `ClockPong` (t1: when the ping arrived,
t2: when it answers, both on its own uncorrected clock); the master notes t3 when the answer
arrives. From one round trip:

    offset = ((t1 − t0) + (t2 − t3)) / 2      (worker's clock − master's)
    delay  = (t3 − t0) − (t2 − t1)            (time on the wire and in the two event loops)

and the true offset lies within ± delay / 2 of the estimate, whatever the asymmetry: that is its
`uncertainty_s`. Of the last `KEEP` round trips the one with the least delay is kept (the
least-queued). The master tells every worker its offset (`ClockOffsets`) after each measurement;
a worker puts its times on the master's clock from then on (contracts/clock.py `master_time`).
A worker counts as ready for a step only once its offset is known (the handshake's `all_ready`).

meta.json `clock`: per worker `offset_s`, `uncertainty_s`, `samples`; `flagged` lists workers
whose offset is unknown or more uncertain than `MAX_UNCERTAINTY_S`, and the analysis warns.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent

from capacity_plugins.contracts import clock as master_clock
from capacity_plugins.swarm import messages
from capacity_plugins.swarm.shipping import WorkerShipping

log = logging.getLogger(__name__)

CLOCK_INTERVAL_S = 2.0
KEEP = 16  # round trips kept per worker (the least-delayed one is the estimate)
MAX_UNCERTAINTY_S = 0.05  # above this, a worker's times are flagged as uncertain
LOG_OFFSET_OVER_S = 0.5  # an offset this large is worth a line in the log


class MasterClock:
    def __init__(self, runner: Any, clock: Callable[[], float] = time.time) -> None:
        self.runner = runner
        self.clock = clock
        self.seq = 0
        # worker → (delay, offset) of its recent round trips
        self.samples: dict[int, deque[tuple[float, float]]] = {}
        self.counts: dict[int, int] = {}
        self._greenlet: Any = None
        self._logged: set[int] = set()
        self.marks: dict[int, int] = {}  # worker → the last shipping mark its pong carried

    def attach(self) -> None:
        # (the handshake pings at each Hello and Ready: one listener per message type in Locust)
        messages.on(self.runner, messages.ClockPong, self._on_pong)
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _loop(self) -> None:
        while True:
            try:
                self.ping()
            except Exception:  # a send to a worker that just left; the next round will do
                log.debug("clock ping failed", exc_info=True)
            gevent.sleep(CLOCK_INTERVAL_S)

    def ping(self) -> None:
        if not list(self.runner.clients.all):
            return
        self.seq += 1
        messages.send(self.runner, messages.ClockPing(seq=self.seq, t0=self.clock()))

    def _on_pong(self, m: messages.ClockPong) -> None:
        self.add(m.worker, m.t0, m.t1, m.t2, self.clock())
        self.marks[m.worker] = max(self.marks.get(m.worker, 0), m.mark)
        messages.send(self.runner, messages.ClockOffsets(offsets={w: e["offset_s"] for w, e in self.estimates().items()},
                                                         marks=dict(self.marks)))

    def add(self, worker: int, t0: float, t1: float, t2: float, t3: float) -> None:
        delay = max((t3 - t0) - (t2 - t1), 0.0)
        offset = ((t1 - t0) + (t2 - t3)) / 2.0
        self.samples.setdefault(worker, deque(maxlen=KEEP)).append((delay, offset))
        self.counts[worker] = self.counts.get(worker, 0) + 1
        # the estimate, not this round trip: a ping held up by a cut came back "+6.9 s ± 6.9 s" for a
        # worker whose clock was right; only an offset beyond its own uncertainty is worth the line
        est = self.estimate(worker)
        if (est is not None and abs(est["offset_s"]) - est["uncertainty_s"] > LOG_OFFSET_OVER_S
                and worker not in self._logged):
            self._logged.add(worker)
            log.warning("capacity: worker %d's clock is %+.3f s off the master's (±%.3f s): its times are corrected "
                        "to the master's", worker, est["offset_s"], est["uncertainty_s"])

    def estimate(self, worker: int) -> dict[str, Any] | None:
        got = self.samples.get(worker)
        if not got:
            return None
        delay, offset = min(got)
        return {"offset_s": round(offset, 6), "uncertainty_s": round(delay / 2.0, 6), "samples": self.counts[worker]}

    def estimates(self) -> dict[int, dict[str, Any]]:
        return {w: e for w in sorted(self.samples) if (e := self.estimate(w)) is not None}

    def known(self, workers: set[int]) -> bool:
        return workers <= set(self.samples)

    def meta(self, workers: list[int], max_uncertainty_s: float = MAX_UNCERTAINTY_S) -> dict[str, Any]:
        """meta.json `clock`: every worker's offset, and those flagged (unknown, or too uncertain)."""
        est = self.estimates()
        flagged = []
        for w in sorted(set(workers) | set(est)):
            e = est.get(w)
            if e is None:
                flagged.append({"worker": w, "why": "unknown (no clock round trip)"})
            elif e["uncertainty_s"] > max_uncertainty_s:
                flagged.append({"worker": w, "why": f"{e['offset_s']:+.3f} s ± {e['uncertainty_s']:.3f} s "
                                                    f"(more than ± {max_uncertainty_s:g} s)"})
        return {"offsets": {str(w): e for w, e in est.items()}, "max_uncertainty_s": max_uncertainty_s,
                "flagged": flagged}


class WorkerClock:
    def __init__(self, runner: Any, worker_index: Callable[[], int], clock: Callable[[], float] = time.time,
                 shipping: WorkerShipping | None = None) -> None:
        self.runner = runner
        self.worker_index = worker_index
        self.clock = clock  # this host's own clock, uncorrected: the measurement needs it raw
        # Each pong carries the shipping's mark, each ClockOffsets acknowledges one: what the
        # master has received is dropped from the worker's copy (swarm/shipping.py).
        self.shipping = shipping

    def attach(self) -> None:
        messages.on(self.runner, messages.ClockPing, self._on_ping)
        messages.on(self.runner, messages.ClockOffsets, self._on_offsets)

    def _on_ping(self, m: messages.ClockPing) -> None:
        t1 = self.clock()
        mark = self.shipping.next_mark() if self.shipping is not None else 0
        messages.send(self.runner, messages.ClockPong(worker=self.worker_index(), seq=m.seq, t0=m.t0, t1=t1,
                                                      t2=self.clock(), mark=mark))

    def _on_offsets(self, m: messages.ClockOffsets) -> None:
        mine = m.offsets.get(self.worker_index())
        if mine is not None:
            master_clock.set_offset(mine)
        mark = m.marks.get(self.worker_index())
        if mark is not None and self.shipping is not None:
            self.shipping.confirm(mark)
