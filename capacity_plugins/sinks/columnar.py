"""requests.arrow: the analysis's columns of requests.jsonl, in Arrow's streaming format.

Parsing JSON is most of what analysing a big run costs (1 M records with 64 ITL gaps: ~970 MB of
JSONL, 6-8 s in pyarrow's JSON reader alone on 2 cores), so the records writer also hands each
drain's records here, to be appended as Arrow record batches of the columns the analysis reads
(`contracts.records.columnar_schema`) with the ITL gaps as float32 (analysis/records.py keeps
them so anyway): read back in a fraction of a second, columns already typed.

Rows are gathered over several drains into one batch of `BATCH_ROWS` records (fewer when their
gaps reach `BATCH_GAPS`, and at close): reading a batch costs the analysis ~0.25 ms whatever its
size, so the ~50 records of a drain in a batch of their own would make a million records' read
~5 s instead of ~1. Until then they wait as typed arrays (the scalars converted per drain, the
gaps copied into one float32 buffer), which the garbage collector never walks; the records
themselves are let go at once. A run killed before its last batch leaves a copy that ends
before the JSONL does: the analysis reads the copy's batches and parses only the JSONL's lines
after them.

requests.jsonl stays the record of the run, for people and tools; this file only speeds up
reading it. The Arrow *stream* format is append-only and readable up to the last whole batch, so
a run killed mid-write leaves a file whose batches before the cut are intact. Each batch carries
the byte range its records take in requests.jsonl, so the analysis can tell from the batch
headers which part of requests.jsonl this file holds exactly (analysis/records.py
`read_columnar`); the JSONL after that part is parsed, and all of it when there is no such part.
It holds no free text (no error messages, no prompts): nothing in it needs the secrets scrub.

Without pyarrow (a worker-only install) no file is written.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.records import JSONL_BYTES, JSONL_FROM, RequestRecord, columnar_schema
from capacity_plugins.host import no_share

log = logging.getLogger(__name__)

ITL_COLUMN = "itl_ms"
# Records per batch, or fewer when their gaps reach BATCH_GAPS (1 MB as float32: the IPC writer
# hands the whole buffer over in one call, and copying it is one piece of ~0.1 ms); fewer at close.
# Checked at the end of each drain (a batch's byte range in requests.jsonl is whole drains').
BATCH_ROWS = 4096
BATCH_GAPS = 1 << 18
# Records per copy of their gaps into the staged buffer between two `share()` calls: each is a C
# loop over the record's list (~1 µs for 255 gaps).
ITL_SLICE = 16
# Bytes per write of a batch to the file: the IPC writer's own writes (one per buffer, straight to
# the file) took 0.2-0.3 ms of the core for 230 KB of gaps. The batch is staged in memory (one copy
# per buffer) and copied out in these slices.
WRITE_BYTES = 64 * 1024


def _value(item: RequestRecord | dict[str, Any], name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name)


class _Staged:
    """The IPC writer's file: keeps what it writes of a batch for `_write_staged` to copy out."""

    closed = False

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> list[bytes]:
        parts, self.parts = self.parts, []
        return parts


class ColumnarWriter:
    """Appends batches of records to `path` (opened on the first batch). Never raises: a failure
    is logged once and the file is given up (the analysis then reads requests.jsonl)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pa: Any = None
        self._schema: Any = None
        self._file: Any = None
        self._writer: Any = None
        self._staged = _Staged()
        self._rows: _Rows | None = None  # converted, not yet in a batch
        self.rows = 0  # in the file
        self.failed = False
        try:
            import pyarrow as pa
            import pyarrow.ipc  # for pa.ipc (a submodule)
        except ImportError:  # worker-only install: JSONL alone
            self.failed = True
            return
        try:
            self._pa = pa
            self._schema = columnar_schema()
            # The whole write path once, here (the process's setup, on its main thread): pyarrow
            # imports pandas on its first array (~0.3 s, ~50 MB), and an import in the writer's
            # native thread would hold the GIL mid-run — or deadlock on gevent's patched import lock.
            none = _Rows(self._schema, 0)
            none.add(pa, [], no_share)
            empty = none.batch(pa)
            with pa.ipc.new_stream(pa.BufferOutputStream(), self._schema) as warm:
                warm.write_batch(empty, custom_metadata={JSONL_FROM: b"0", JSONL_BYTES: b"0"})
        except Exception as e:  # a pyarrow too old or broken: JSONL alone
            log.warning("%s: not written (%s: %s); the analysis will read requests.jsonl",
                        self.path.name, type(e).__name__, e)
            self.failed = True

    def write(self, items: list[RequestRecord | dict[str, Any]], jsonl_from: int, jsonl_bytes: int,
              share: Callable[[], None] = no_share) -> None:
        """Add `items`, written to requests.jsonl just before, from byte `jsonl_from` to its end
        at `jsonl_bytes`; a batch is written once enough rows wait. `share` is called between
        pieces of the work (host.py GilShare): no single step holds the GIL for long."""
        if self.failed or not items:
            return
        try:
            rows = self._rows
            if rows is not None and rows.jsonl_bytes != jsonl_from:  # a gap (another writer's lines)
                self._write_batch(share)  # the rows before it keep their own range
                rows = None
            if rows is None:
                rows = self._rows = _Rows(self._schema, jsonl_from)
            rows.add(self._pa, items, share)
            rows.jsonl_bytes = jsonl_bytes
            if rows.count >= BATCH_ROWS or len(rows.gaps) >= BATCH_GAPS:
                self._write_batch(share)
        except Exception as e:  # a record the schema cannot hold, a full disk: JSONL still has it
            self._give_up(e)

    def _write_batch(self, share: Callable[[], None]) -> None:
        rows, self._rows = self._rows, None
        if rows is None:
            return
        pa = self._pa
        batch = rows.batch(pa)
        share()
        if self._writer is None:
            self._file = self.path.open("wb")
            self._writer = pa.ipc.new_stream(self._staged, self._schema)
        self._writer.write_batch(batch, custom_metadata={JSONL_FROM: str(rows.jsonl_from).encode(),
                                                         JSONL_BYTES: str(rows.jsonl_bytes).encode()})
        share()
        self._write_staged(share)
        self.rows += rows.count

    def _give_up(self, e: Exception) -> None:
        log.warning("%s: not written further (%s: %s); the analysis will read requests.jsonl",
                    self.path.name, type(e).__name__, e)
        self.failed = True
        self._rows = None
        self._staged.take()  # a batch cut short is not written: the file ends at its last whole one
        self.close()

    def _write_staged(self, share: Callable[[], None]) -> None:
        for part in self._staged.take():
            view = memoryview(part)
            for i in range(0, len(view), WRITE_BYTES):
                self._file.write(view[i:i + WRITE_BYTES])
                share()
        self._file.flush()

    def close(self) -> None:
        if not self.failed:
            try:
                self._write_batch(no_share)  # the rows still waiting
            except Exception as e:
                self._give_up(e)
                return
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()  # the end-of-stream marker
                self._write_staged(no_share)
        except Exception:  # a broken stream: the reader stops at its last whole batch
            pass
        finally:
            file, self._file = self._file, None
            if file is not None:
                file.close()


class _Rows:
    """Rows converted for the next batch: each scalar column as Arrow arrays (one per drain), the
    gaps in one float32 buffer with their offsets — nothing the garbage collector walks."""

    def __init__(self, schema: Any, jsonl_from: int) -> None:
        self.schema = schema
        self.names = [f.name for f in schema if f.name != ITL_COLUMN]
        self.types = [f.type for f in schema if f.name != ITL_COLUMN]
        self.scalars: list[list[Any]] = [[] for _ in self.names]
        self.gaps = array("f")
        self.offsets = array("i", [0])
        self.count = 0
        self.jsonl_from = self.jsonl_bytes = jsonl_from

    def add(self, pa: Any, items: list[RequestRecord | dict[str, Any]], share: Callable[[], None]) -> None:
        if all(type(r) is RequestRecord for r in items):  # this process's own: C-level getters
            column: Any = lambda name: list(map(attrgetter(name), items))  # noqa: E731 - one name bound per branch, called per column below
        else:  # records that came from workers, as dicts (or a mix)
            column = lambda name: [_value(r, name) for r in items]  # noqa: E731 - as above
        for name, kind, arrays in zip(self.names, self.types, self.scalars, strict=True):
            arrays.append(pa.array(column(name), type=kind))  # a master's drain can be 1000s of rows
            share()
        gaps, offsets = self.gaps, self.offsets
        for i, values in enumerate(column(ITL_COLUMN), 1):
            gaps.extend(values or ())
            offsets.append(len(gaps))
            if i % ITL_SLICE == 0:
                share()
        self.count += len(items)

    def batch(self, pa: Any) -> Any:
        values = pa.Array.from_buffers(pa.float32(), len(self.gaps), [None, pa.py_buffer(self.gaps)])
        offsets = pa.Array.from_buffers(pa.int32(), len(self.offsets), [None, pa.py_buffer(self.offsets)])
        columns = [pa.concat_arrays(arrays) for arrays in self.scalars]
        columns.append(pa.ListArray.from_arrays(offsets, values))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
