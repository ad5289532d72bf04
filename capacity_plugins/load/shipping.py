"""Moving finished records from the workers to the master, the one process that writes them.

A worker ships its buffered records (`RecordsBatch`) every `SHIP_INTERVAL_S`, and once more with
`final=True` when it stops (test_stop) and when it quits, so a clean stop loses nothing and a
`kill -9` loses at most the last interval. Both numbers are small for the worker's timing's sake:
records waiting in the buffer are walked by every garbage collection that runs meanwhile (a
streamed record's 255 gaps are 255 visits), and Locust encodes a message in one piece on the
hub (msgpack: 8-11 ms for 1000 streamed records, a second's at a worker's full ingest). So a
tenth of a second's records go in messages of at most `SHIP_MAX_RECORDS` (~0.5 ms to encode),
and the hub runs whatever is ready between two. The master hands each batch to its records sink
and, before it quits, waits (bounded) until every worker that ran has sent its final batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from capacity_plugins.load import messages
from capacity_plugins.sinks.records import RecordsSink

log = logging.getLogger(__name__)

SHIP_INTERVAL_S = 0.1
SHIP_MAX_RECORDS = 64
FINAL_WAIT_S = 10.0


class WorkerShipping:
    def __init__(self, runner: Any, sink: RecordsSink, worker_index: Callable[[], int]) -> None:
        self.runner = runner
        self.sink = sink
        self.worker_index = worker_index
        self._loop: Any = None

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
        # Taken a message at a time, not all at once: a stop that kills the shipping loop while it
        # lets the hub run leaves what it had not sent in the buffer, for the final batch.
        due = max(1, -(-self.sink.buffered // SHIP_MAX_RECORDS))  # messages for what waits now
        for k in range(due):
            if k:
                gevent.sleep(0)  # the hub's ready reads between two messages
            batch = self.sink.take_batch(SHIP_MAX_RECORDS)
            done = k == due - 1 or not self.sink.buffered
            if final and done:
                batch += self.sink.take_batch()  # and what was added meanwhile: nothing follows
            if batch or (final and done):
                messages.send(self.runner, messages.RecordsBatch(
                    worker=self.worker_index(), records=batch, produced=self.sink.produced,
                    final=final and done,
                ))
            if done:
                return


class MasterReceiving:
    def __init__(self, runner: Any, sink: RecordsSink) -> None:
        self.runner = runner
        self.sink = sink

    def attach(self) -> None:
        messages.on(self.runner, messages.RecordsBatch,
                    lambda b: self.sink.receive(b.worker, b.records, b.produced, b.final))

    def wait_for_finals(self, expected: Callable[[], set[int]], timeout_s: float = FINAL_WAIT_S) -> bool:
        """Wait until every expected worker sent its final batch. `expected` is re-read while
        waiting: a worker the master marks missing (killed) meanwhile is no longer waited for."""
        deadline = time.monotonic() + timeout_s
        while not (worker_indices := expected()) <= self.sink.final_from:
            if time.monotonic() > deadline:
                missing = sorted(worker_indices - self.sink.final_from)
                log.warning("no final record batch from worker(s) %s; their last records may be lost", missing)
                return False
            gevent.sleep(0.05)
        return True
