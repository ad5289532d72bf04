"""requests.jsonl: every finished request attempt, never lost.

Local run: the process appends and flushes each record as it finishes.
Distributed (`--processes N`, master + workers): only the master writes. A worker keeps its
records in a buffer that load/shipping.py sends to the master at least every second and once more
(final) when the worker stops; the master writes them to one file as they arrive (`receive`). A
worker killed hard loses at most its last second; the master counts what it received against
what each worker said it produced, and meta.json reports the difference (`accounting`).

Every line written passes the run's `Secrets` scrub: a server that echoes a key into an error
body does not put it into the file. No Locust or gevent here: transport is the load side's job.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO, Any

import orjson

from capacity_plugins.contracts.folders import RECORDS_FILE
from capacity_plugins.contracts.records import RequestRecord
from capacity_plugins.contracts.redaction import Secrets

log = logging.getLogger(__name__)


class RecordsSink:
    """Role-specific: `local` and `master` write, `worker` buffers. `add()` is the only hot-path call."""

    def __init__(self, results_dir: Path, role: str, secrets: Secrets | None = None,
                 emit: Any = None) -> None:
        self.role = role
        self.path: Path = Path(results_dir) / RECORDS_FILE
        self.secrets = secrets if secrets is not None else Secrets()
        # Called with every record written here (live views, step accounting); must not raise.
        self._emit = emit or (lambda record: None)
        self._file: IO[bytes] | None = None
        self._buffer: list[dict[str, Any]] = []
        self.produced = 0  # worker/local: records made here
        self.written = 0  # local/master: lines written
        self.received_by_worker: dict[int, int] = {}
        self.produced_by_worker: dict[int, int] = {}
        self.final_from: set[int] = set()
        self.closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        if self.role != "worker" and self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")

    def close(self) -> None:
        """Flush and close (safe to call more than once)."""
        if self.closed:
            return
        self.closed = True
        if self._file is not None:
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
        self.path = Path(results_dir) / RECORDS_FILE
        self.closed = False
        self.open()
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
        self._emit(record)

    def _write(self, line: bytes) -> None:
        if self._file is None:  # a record after close (a straggler at quit): reopen and append
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        self._file.write(self.secrets.scrub_bytes(line))
        self._file.flush()
        self.written += 1

    # -- worker side --------------------------------------------------------------------------

    def take_batch(self) -> list[dict[str, Any]]:
        """The records buffered since the last call (a worker ships them to its master)."""
        batch, self._buffer = self._buffer, []
        return batch

    # -- master side --------------------------------------------------------------------------

    def receive(self, worker: int, records: list[dict[str, Any]], produced: int, final: bool) -> None:
        """A batch from a worker: write it, and note what the worker says it has produced so far."""
        for d in records:
            self._write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
            try:
                self._emit(RequestRecord.from_dict(d))
            except TypeError:
                log.warning("worker %s sent a record this master cannot read", worker)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(records)
        self.produced_by_worker[worker] = max(self.produced_by_worker.get(worker, 0), produced)
        if final:
            self.final_from.add(worker)

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
