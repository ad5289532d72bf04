"""requests.jsonl: every finished request attempt, never lost.

Local run: the process appends and flushes each record as it finishes.
Distributed (`--processes N`, master + workers): only the master writes. A worker's writer thread
turns its records into the same JSON lines a local run writes (scrubbed), which swarm/shipping.py
sends to the master at least every second and once more (final) when the worker stops; the master
writes them to one file as they arrive (`receive`). A worker killed hard loses at most its last
second and the writer's interval; the master counts what it received against what each worker
said it produced, and meta.json reports the difference (`accounting`).

Every line written passes the run's `Secrets` scrub: a server that echoes a key into an error
body does not put it into the file. No Locust or gevent here: transport is the load side's job.

Writing is off the event loop: `add` / `receive` only append to a list (under a real lock;
`receive` parses a worker's lines once, for the live views); a native thread
(host.py) serialises, scrubs and writes it every `FLUSH_INTERVAL_S` and flushes, so
a master ingesting thousands of records a second never delays its heartbeats. On a worker the
same thread turns the records into lines for the shipping loop, which only hands bytes on. It does
so in short slices (records serialised and written 16 at a time), each started when the hub is
next idle (`HubIdleGate`), at a pace that leaves the hub its core (`GilShare`) for at most
`POLITE_S`, then unpaced: a `kill -9` loses at most what finished in the last interval and that pacing.
`close()` writes everything left before it returns.

The same thread hands each drain's records to requests.arrow's writer (sinks/columnar.py): the
analysis's columns, typed, so a big run is analysed without parsing its JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
from capacity_plugins.contracts.records import RequestRecord
from capacity_plugins.contracts.redaction import Secrets
from capacity_plugins.host import GilShare, HubIdleGate, NativeLoop, no_share, real_lock
from capacity_plugins.sinks.columnar import ColumnarWriter

log = logging.getLogger(__name__)


# Why so often: records waiting here are objects the garbage collector walks (a streamed record's
# list of 255 gaps is 255 visits, each a cache miss), so the collections that run while the hub
# works got longer with every record waiting. A quarter second's worth (~250 records at a
# worker's full ingest) made young-generation collections of ~1-1.5 ms — first tokens waiting
# behind them were stamped a decode step late (0.55 % of them at 75 % of a core with 1 ms steps,
# against 0.21 % with 50 ms, and 0.02 % with no sink: medians of 6 paired rounds). Draining more
# often costs the writer a wakeup per interval; requests.arrow still gets big batches
# (sinks/columnar.py).
FLUSH_INTERVAL_S = 0.05
# How long a drain goes at the pace that leaves the hub its core (host.py GilShare)
# before it finishes at full speed: a record is in the file at most FLUSH_INTERVAL_S + POLITE_S
# + the rest of its drain's work after it finished.
POLITE_S = 0.25
# Records per write: 200 streamed records are ~600 KB, and joining and copying them into the page
# cache in one piece took ~1.7 ms of the core (longer than a fast server's decode step, all of it
# in front of the hub's reads); 16 records are ~50 KB, ~0.1 ms.
WRITE_SLICE = 16


class RecordsSink:
    """Role-specific: `local` and `master` write, `worker` buffers. `add()` is the only hot-path call."""

    def __init__(self, results_dir: Path, role: str, secrets: Secrets | None = None,
                 emit: Any = None) -> None:
        self.role = role
        self.path: Path = Path(results_dir) / RECORDS_FILE
        self.secrets = secrets if secrets is not None else Secrets()
        # Called with every record written here (live views, step accounting); must not raise.
        self._emit = emit or (lambda record: None)
        # Records waiting for the writer thread: a RequestRecord (made here), or a dict and its
        # JSON line (a worker's, received by the master).
        self._pending: list[RequestRecord | tuple[dict[str, Any], bytes]] = []
        self._outbox: list[bytes] = []  # worker: JSON lines waiting to be shipped, a few records a piece
        self._lock = real_lock()  # guards _pending and _outbox (hub appends / takes, the writer takes / appends)
        self._io_lock = real_lock()  # one drain at a time (writer thread, or close / accounting)
        self._writer: NativeLoop | None = None
        self._gate: HubIdleGate | None = None  # made in open(), on the hub's thread
        self._file: IO[bytes] | None = None
        self._columnar: ColumnarWriter | None = None
        self.produced = 0  # worker/local: records made here
        self.written = 0  # local/master: lines written (by the writer thread)
        self.received_by_worker: dict[int, int] = {}
        self.produced_by_worker: dict[int, int] = {}
        self.final_from: set[int] = set()
        self.closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        if self._writer is not None:
            return
        if self.role != "worker":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
            self._columnar = ColumnarWriter(self.path.parent / COLUMNAR_FILE)
        if self._gate is None:
            self._gate = HubIdleGate.of_this_hub()
        self._writer = NativeLoop("records-writer", FLUSH_INTERVAL_S, self._drain_beside_hub,
                                  final=self._drain)  # the run is over: at full speed
        self._writer.start()

    def close(self) -> None:
        """Write everything pending and close the file (safe to call more than once)."""
        if self.closed:
            return
        self.closed = True
        self._stop_writer()

    def _stop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()  # its final drain writes what is left
        self._drain()  # anything added while it stopped
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._columnar is not None:
            self._columnar.close()  # a straggler after this is in requests.jsonl only
            self._columnar = None

    def flush(self) -> None:
        """Write what is pending now (the caller's thread), e.g. before reading the file."""
        self._drain()

    def rotate(self, results_dir: Path) -> None:
        """Continue in another folder (a new test started from the web UI is its own run).

        What was written so far stays complete in the old folder; counts start again so each
        folder's meta.json accounts for its own records only.
        """
        if self.role == "worker":
            return
        self._stop_writer()
        self.path = Path(results_dir) / RECORDS_FILE
        self.closed = False
        self.produced = self.written = 0
        self.received_by_worker.clear()
        self.produced_by_worker.clear()
        self.final_from.clear()
        self.open()

    # -- records ------------------------------------------------------------------------------

    def add(self, record: RequestRecord) -> None:
        self.produced += 1
        with self._lock:
            self._pending.append(record)
        if self.role != "worker":  # a worker's records are seen where they are written
            self._emit(record)

    def _drain(self, share: Callable[[], None] = no_share) -> None:
        """Serialise, scrub and write what is pending, then flush (the writer thread, or close)."""
        with self._io_lock:
            self._drain_locked(share)

    def _drain_beside_hub(self) -> None:
        # the writer thread: in slices the hub's reads fit between, within the durability bound
        self._drain(GilShare(POLITE_S, self._gate))

    def _drain_locked(self, share: Callable[[], None]) -> None:
        with self._lock:
            items, self._pending = self._pending, []
        if not items:
            return
        if self.role == "worker":
            for i in range(0, len(items), WRITE_SLICE):
                lines = self._lines(items[i:i + WRITE_SLICE], share)
                with self._lock:
                    self._outbox.append(lines)
                share()
            return
        if self._file is None:  # a record after close (a straggler at quit): reopen and append
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        start = self._file.tell()
        for i in range(0, len(items), WRITE_SLICE):
            self._file.write(self._lines(items[i:i + WRITE_SLICE], share))
            share()
        self._file.flush()
        self.written += len(items)
        if self._columnar is not None:
            self._columnar.write([r if isinstance(r, RequestRecord) else r[0] for r in items],
                                 start, self._file.tell(), share)

    def _lines(self, items: list[RequestRecord | tuple[dict[str, Any], bytes]], share: Callable[[], None]) -> bytes:
        """The records' JSON lines, scrubbed: the master scrubs a worker's lines again, as they may
        hold what only the master knows to be a secret."""
        lines = []
        for r in items:
            lines.append(r.to_json_bytes() if isinstance(r, RequestRecord) else r[1])
            share()
        return self.secrets.scrub_bytes(b"".join(lines))

    # -- worker side --------------------------------------------------------------------------

    def take_batch(self, *, final: bool = False) -> list[bytes]:
        """The JSON lines (in pieces of a few records) the writer thread made since the last call,
        for a worker to ship to its master; `final`: of every record added so far, the ones
        still waiting for the writer turned into lines here."""
        if final:
            self._drain()
        with self._lock:
            lines, self._outbox = self._outbox, []
        return lines

    # -- master side --------------------------------------------------------------------------

    def receive(self, worker: int, lines: list[bytes], produced: int, final: bool) -> None:
        """A batch of a worker's JSON lines: queue them for writing, and note what the worker says
        it has produced. The lines are written as they came; the records in them are parsed once,
        for the live views and requests.arrow."""
        got: list[tuple[dict[str, Any], bytes]] = []
        for piece in lines:
            rows = piece.splitlines(keepends=True)
            try:
                got.extend(zip(orjson.loads(b"[" + b",".join(rows) + b"]"), rows, strict=True))
            except (orjson.JSONDecodeError, ValueError):
                log.warning("worker %s sent records this master cannot read: %d lost", worker, len(rows))
        with self._lock:
            self._pending.extend(got)
        for d, _line in got:
            try:
                self._emit(RequestRecord.from_dict(d))
            except TypeError:
                log.warning("worker %s sent a record this master cannot read", worker)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(got)
        self.produced_by_worker[worker] = max(self.produced_by_worker.get(worker, 0), produced)
        if final:
            self.final_from.add(worker)

    def accounting(self) -> dict[str, Any]:
        """For meta.json: what was written and what we know was lost."""
        self._drain()  # what is counted as written is in the file
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
