"""requests.arrow: the analysis's columns of requests.jsonl, in Arrow's streaming format.

Parsing JSON is most of what analysing a big run costs (1 M records with 64 ITL gaps: ~970 MB of
JSONL, 6-8 s in pyarrow's JSON reader alone on 2 cores), so the records writer also appends each
batch it writes to requests.jsonl here, as one Arrow record batch of the columns the analysis
reads (`contracts.records.columnar_schema`) and the ITL gaps as float32 (analysis/records.py
keeps them so anyway): read back in a fraction of a second, columns already typed.

requests.jsonl stays the record of the run, for people and tools; this file only speeds up
reading it. The Arrow *stream* format is append-only and readable up to the last whole batch, so
a run killed mid-write leaves a file whose batches before the cut are intact. Each batch carries
the byte range its records take in requests.jsonl, so the analysis can tell in O(1) whether this
file holds exactly the records requests.jsonl holds (analysis/records.py `read_columnar`); when
it does not, the JSONL is read. It holds no free text (no error messages, no prompts): nothing in
it needs the secrets scrub.

Without pyarrow (a worker-only install) no file is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.records import JSONL_BYTES, JSONL_FROM, RequestRecord, columnar_schema
from capacity_plugins.telemetry._native import no_share

log = logging.getLogger(__name__)

ITL_COLUMN = "itl_ms"
# Records per conversion of the gaps: 16 x 255 Python floats took 0.3-0.7 ms of a busy core in one
# piece; 4 take ~0.05-0.1 ms.
ITL_SLICE = 4
# Bytes per write of a batch to the file: the gaps of a quarter second's 200 records are ~230 KB,
# and the IPC writer's own writes (one per buffer, straight to the file) took 0.2-0.3 ms of the
# core in one piece. The batch is staged in memory (~30 µs) and copied out in these slices.
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
        self.rows = 0
        self.failed = False
        try:
            import pyarrow as pa
            import pyarrow.ipc  # noqa: F401
        except ImportError:  # worker-only install: JSONL alone
            self.failed = True
            return
        try:
            self._pa = pa
            self._schema = columnar_schema()
            # The whole write path once, here (the process's setup, on its main thread): pyarrow
            # imports pandas on its first array (~0.3 s, ~50 MB), and an import in the writer's
            # native thread would hold the GIL mid-run — or deadlock on gevent's patched import lock.
            empty = pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in self._schema], schema=self._schema)
            with pa.ipc.new_stream(pa.BufferOutputStream(), self._schema) as warm:
                warm.write_batch(empty, custom_metadata={JSONL_FROM: b"0", JSONL_BYTES: b"0"})
        except Exception as e:  # a pyarrow too old or broken: JSONL alone
            log.warning("%s: not written (%s: %s); the analysis will read requests.jsonl",
                        self.path.name, type(e).__name__, e)
            self.failed = True

    def write(self, items: list[RequestRecord | dict[str, Any]], jsonl_from: int, jsonl_bytes: int,
              share: Callable[[], None] = no_share) -> None:
        """Append `items`, written to requests.jsonl just before, from byte `jsonl_from` to its
        end at `jsonl_bytes`. `share` is called between pieces of the work (telemetry/_native.py
        GilShare): no single conversion holds the GIL for long."""
        if self.failed or not items:
            return
        try:
            pa = self._pa
            if all(type(r) is RequestRecord for r in items):  # this process's own: C-level getters
                column: Any = lambda name: list(map(attrgetter(name), items))  # noqa: E731
            else:  # records that came from workers, as dicts (or a mix)
                column = lambda name: [_value(r, name) for r in items]  # noqa: E731
            columns = []
            for field in self._schema:
                values = column(field.name)
                if field.name == ITL_COLUMN:  # ~255 gaps a record: one call would hold the GIL ms
                    pieces = []
                    for i in range(0, len(values), ITL_SLICE):
                        pieces.append(pa.array(values[i:i + ITL_SLICE], type=field.type))
                        share()
                    columns.append(pa.concat_arrays(pieces))
                else:
                    columns.append(pa.array(values, type=field.type))
                share()
            batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
            if self._writer is None:
                self._file = self.path.open("wb")
                self._writer = pa.ipc.new_stream(self._staged, self._schema)
            self._writer.write_batch(batch, custom_metadata={JSONL_FROM: str(jsonl_from).encode(),
                                                             JSONL_BYTES: str(jsonl_bytes).encode()})
            share()
            self._write_staged(share)
            self.rows += len(items)
        except Exception as e:  # a record the schema cannot hold, a full disk: JSONL still has it
            log.warning("%s: not written further (%s: %s); the analysis will read requests.jsonl",
                        self.path.name, type(e).__name__, e)
            self.failed = True
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
