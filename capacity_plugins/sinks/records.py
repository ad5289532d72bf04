"""requests.jsonl: every finished request attempt, never lost.

Local run: the process appends and flushes each record as it finishes.
Distributed (`--processes N`, master + workers): only the master writes. Workers buffer records
and ship them with a custom message at least every second, and once more (final) at test_stop
and quitting; the master writes them to one file as they arrive. A worker killed hard loses at
most its last second; the master counts what it received against what each worker said it
produced, and meta.json reports the difference.

The master must not quit before the final batches arrive: Locust's MasterRunner.quit() waits only
0.5 s for workers (reference/locust.md §3.4). `install_master_quit_wait` wraps the runner's quit
so it first stops the workers (which flush at their test_stop) and waits for every final batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import orjson

from capacity_plugins.record import RequestRecord

if TYPE_CHECKING:
    from capacity_plugins.context import RunContext

log = logging.getLogger(__name__)

MSG_RECORDS = "capacity_records"
SHIP_INTERVAL_S = 1.0
FINAL_WAIT_S = 10.0


class RecordsSink:
    """Role-specific: `local` and `master` write, `worker` ships. `add()` is the only hot-path call."""

    def __init__(self, ctx: RunContext, runner: Any, role: str) -> None:
        self.ctx = ctx
        self.runner = runner
        self.role = role
        self.path: Path = ctx.results_dir / "requests.jsonl"
        self._file: Any = None
        self._buffer: list[dict[str, Any]] = []
        self._shipper: Any = None
        self.produced = 0  # worker/local: records made here
        self.written = 0  # local/master: lines written
        self.received_by_worker: dict[int, int] = {}
        self.produced_by_worker: dict[int, int] = {}
        self.final_from: set[int] = set()
        self.closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        if self.role == "worker":
            if self._shipper is None:
                self._shipper = gevent.spawn(self._ship_loop)
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        if self.role == "master":
            self.runner.register_message(MSG_RECORDS, self._on_batch)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.role == "worker":
            self.ship(final=True)
            if self._shipper is not None:
                self._shipper.kill(block=False)
        elif self._file is not None:
            self._file.flush()
            self._file.close()
            self._file = None

    def rotate(self, results_dir: Path) -> None:
        """Continue in another folder (a new test started from the web UI is its own run).

        What was written so far stays complete in the old folder; counts start again so each
        folder's meta.json accounts for its own records only.
        """
        if self.role == "worker":
            return
        if self._file is not None:
            self._file.flush()
            self._file.close()
            self._file = None
        self.path = Path(results_dir) / "requests.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        self.produced = self.written = 0
        self.received_by_worker.clear()
        self.produced_by_worker.clear()
        self.final_from.clear()

    # -- records ------------------------------------------------------------------------------

    def add(self, record: RequestRecord) -> None:
        self.produced += 1
        if self.role == "worker":
            self._buffer.append(record.to_dict())
            return
        self._write(record.to_json_bytes())
        self.ctx.emit(record)

    def _write(self, line: bytes) -> None:
        if self._file is None:  # a record after close (a straggler at quit): reopen and append
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        self._file.write(line)
        self._file.flush()
        self.written += 1

    # -- worker side --------------------------------------------------------------------------

    def _ship_loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            try:
                self.ship(final=False)
            except Exception:  # keep shipping; a transient send error must not end the loop
                log.exception("shipping records to the master failed")

    def ship(self, *, final: bool) -> None:
        """Send buffered records (and the produced count) to the master."""
        if self.role != "worker":
            return
        batch, self._buffer = self._buffer, []
        if not batch and not final:
            return
        self.runner.send_message(
            MSG_RECORDS,
            {"worker": self.ctx.worker_index, "records": batch, "produced": self.produced, "final": final},
        )

    # -- master side --------------------------------------------------------------------------

    def _on_batch(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        data = msg.data
        worker = int(data.get("worker", -1))
        for d in data.get("records", ()):
            self._write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
            try:
                self.ctx.emit(RequestRecord.from_dict(d))
            except TypeError:
                log.warning("worker %s sent a record this master cannot read", worker)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(data.get("records", ()))
        self.produced_by_worker[worker] = max(self.produced_by_worker.get(worker, 0), int(data.get("produced", 0)))
        if data.get("final"):
            self.final_from.add(worker)

    def wait_for_finals(self, expected: Callable[[], set[int]], timeout_s: float = FINAL_WAIT_S) -> bool:
        """Wait until every expected worker sent its final batch. `expected` is re-read while
        waiting: a worker the master marks missing (killed) meanwhile is no longer waited for."""
        deadline = time.monotonic() + timeout_s
        while not (worker_indices := expected()) <= self.final_from:
            if time.monotonic() > deadline:
                missing = sorted(worker_indices - self.final_from)
                log.warning("no final record batch from worker(s) %s; their last second may be lost", missing)
                return False
            gevent.sleep(0.05)
        return True

    def accounting(self) -> dict[str, Any]:
        """For meta.json: what was written and what we know was lost."""
        if self.role == "local":
            return {"written": self.written, "produced": self.produced, "lost": self.produced - self.written}
        produced = sum(self.produced_by_worker.values())
        received = sum(self.received_by_worker.values())
        return {
            "written": self.written,
            "received": received,
            "produced_reported": produced,
            "lost": max(0, produced - received),
            "by_worker": {
                str(w): {
                    "received": self.received_by_worker.get(w, 0),
                    "produced_reported": self.produced_by_worker.get(w, 0),
                    "final_batch": w in self.final_from,
                }
                for w in sorted(set(self.produced_by_worker) | set(self.received_by_worker))
            },
            "note": "a worker killed without a final batch may also have lost records it never reported",
        }


def install_master_quit_wait(runner: Any, sink: RecordsSink, ran: Callable[[], bool]) -> None:
    """Make MasterRunner.quit() stop the workers and wait for their final record batches first."""
    from locust.runners import STATE_INIT, STATE_MISSING, STATE_STOPPED, STATE_STOPPING

    original_quit = runner.quit

    def quit_after_final_records() -> None:
        try:
            if ran():
                ran_on = {c.id for c in runner.clients.all}

                def expected() -> set[int]:
                    # a worker marked missing (killed, no heartbeat) will never send a final batch
                    return {
                        runner.get_worker_index(c.id)
                        for c in runner.clients.all
                        if c.id in ran_on and c.state != STATE_MISSING
                    }

                if runner.state not in (STATE_INIT, STATE_STOPPED, STATE_STOPPING):
                    runner.stop()  # sends stop to workers, waits until they report zero users
                sink.wait_for_finals(expected)
        except Exception:
            log.exception("waiting for the workers' final records failed")
        original_quit()

    runner.quit = quit_after_final_records
