"""Moving finished records from the workers to the master, the one process that writes them.

A worker ships its buffered records (`RecordsBatch`) at least every `SHIP_INTERVAL_S`, and once
more with `final=True` when it stops (test_stop) and when it quits, so a clean stop loses nothing
and a `kill -9` loses at most the last interval. Until the master acknowledges them (the shipping
mark a clock round trip carries, swarm/clock.py), a worker keeps a copy of the batches it sent:
a worker whose master is gone for good writes them to disk (swarm/deadman.py), where ZeroMQ's
queue toward a vanished host would have dropped them. The master hands each batch to its records sink
and, before it quits, waits (bounded) until every worker that ran has sent its final batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from capacity_plugins.sinks.records import RecordsSink
from capacity_plugins.swarm import messages

log = logging.getLogger(__name__)

SHIP_INTERVAL_S = 1.0
FINAL_WAIT_S = 10.0


class WorkerShipping:
    def __init__(self, runner: Any, sink: RecordsSink, worker_index: Callable[[], int]) -> None:
        self.runner = runner
        self.sink = sink
        self.worker_index = worker_index
        self._loop: Any = None
        self.mark = 0  # bumped at each clock pong; a batch carries the mark it was sent under
        self.unconfirmed: list[tuple[int, list[bytes]]] = []

    def start(self) -> None:
        if self._loop is None:
            self._loop = gevent.spawn(self._ship_loop)

    def stop(self) -> None:
        """Ship what is left (final) and end the loop; safe to call more than once."""
        self.ship(final=True)
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None

    def _ship_loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            try:
                self.ship(final=False)
            except Exception:  # keep shipping; a transient send error must not end the loop
                log.exception("shipping records to the master failed")

    def ship(self, *, final: bool) -> None:
        lines = self.sink.take_batch(final=final)
        if not lines and not final:
            return
        if lines:
            self.unconfirmed.append((self.mark, lines))
        messages.send(self.runner, messages.RecordsBatch(
            worker=self.worker_index(), lines=lines, produced=self.sink.produced, final=final,
        ))


    def next_mark(self) -> int:
        """A new mark, for a pong about to be sent: every batch sent so far is older."""
        self.mark += 1
        return self.mark

    def confirm(self, mark: int) -> None:
        """The master received everything sent before the pong that carried `mark`."""
        self.unconfirmed = [(m, lines) for m, lines in self.unconfirmed if m >= mark]

    def unacknowledged(self) -> list[bytes]:
        """Every line sent that the master has not acknowledged, then the ones never sent."""
        out = [line for _m, lines in self.unconfirmed for line in lines]
        self.unconfirmed = []
        return out + self.sink.take_batch(final=True)


class MasterReceiving:
    def __init__(self, runner: Any, sink: RecordsSink) -> None:
        self.runner = runner
        self.sink = sink

    def attach(self) -> None:
        messages.on(self.runner, messages.RecordsBatch,
                    lambda b: self.sink.receive(b.worker, b.lines, b.produced, b.final))

    def wait_for_finals(self, expected: Callable[[], set[int]], timeout_s: float = FINAL_WAIT_S) -> bool:
        """Wait until every expected worker sent its final batch. `expected` is re-read while
        waiting: a worker the master marks missing (killed) meanwhile is no longer waited for."""
        deadline = time.monotonic() + timeout_s
        while not (worker_indices := expected()) <= self.sink.final_from:
            if time.monotonic() > deadline:
                missing = sorted(worker_indices - self.sink.final_from)
                log.warning("no final record batch from worker(s) %s; their last second may be lost", missing)
                return False
            gevent.sleep(0.05)
        return True
