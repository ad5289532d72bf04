"""A run's records as the analysis holds them: one step at a time, never the whole run at once.

The analysis computes per-step tables (percentiles, counts, tokens per step), so a step's records
are all it needs at a time; what spans the run is small and kept on the way (the ITL gaps, counted
by value: analysis/gaps.py; the stability's send-time span; the report's box-plot samples; the
sections' per-step figures). So a 10 M-record sweep's analysis holds the columns of its largest
step, not of its 10 M records; a run of one step (a soak) holds that step's, as before: its exact
percentiles need every value.

`Records` is what `RunData.records` is:

| member | what | memory |
|---|---|---|
| `count` | records in the run | — |
| `has(column)` | whether any record has a value in the column (which sections apply) | — |
| `steps()` | each step value's records (every value: -1 and steps steps.json does not list too), once each, in the file's order within a step | one step's columns (two while records of consecutive steps interleave) |
| `frame(columns)` | every record at once (`RunData.requests`: all columns) | the whole run's columns asked for: only where a figure spans the steps — the stability's drift (a soak, or a run of one step: `columns` its five), a replay of conversations' turns (trace_windows.py) |

Two kinds: `FrameRecords` around a frame already in memory (requests.jsonl parsed whole: an older
run, a master without pyarrow, an ITL side file) and `ArrowRecords`, read from requests.arrow
batch by batch (records.py `read_columnar` walked it once for the gaps and the step counts) and
from the JSONL's lines after its last batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from capacity_plugins.contracts.records import ANALYSIS_COLUMNS, columnar_schema

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData

# the columns read from requests.arrow (no request_id: nothing downstream joins on it, and as Python
# strings it would cost ~70 bytes a record)
COLUMNS = tuple(c for c in ANALYSIS_COLUMNS if c != "request_id")


# What reads each step's records on the analysis's one walk over them (table.py `step_rows`):
# called with every step value (-1 and values steps.json does not list too) and its records.
StepConsumer = Callable[[int, pd.DataFrame], None]
C = TypeVar("C", bound=Callable[[int, pd.DataFrame], None])


def gathered(run: RunData, name: str, make: Callable[[], C]) -> C:
    """The step consumer `name` after the analysis's walk (the pipeline registers it in
    `run.gathered` before walking); made and walked now when the run was not analysed (a
    report or a section computed alone)."""
    got = run.gathered.get(name)
    if got is None:
        got = run.gathered[name] = make()
        for index, records in run.records.steps():
            got(index, records)
            del records  # before the next step's columns are allocated (Records.steps)
    return got


class Records:
    """A run's records (module doc)."""

    count: int

    def has(self, column: str) -> bool:
        raise NotImplementedError

    def steps(self) -> Iterator[tuple[int, pd.DataFrame]]:
        raise NotImplementedError

    def frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        raise NotImplementedError

    def empty(self) -> pd.DataFrame:
        """No records, with the columns and dtypes `steps()` gives (a step nobody sent to)."""
        raise NotImplementedError


class FrameRecords(Records):
    """Records already in one frame: a step is a slice of it where the records are step-ordered
    (the shape drains between steps), else a copy of the step's rows, one step at a time."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame
        self.count = len(frame)

    def has(self, column: str) -> bool:
        col = self._frame.get(column)
        return col is not None and bool(col.notna().any())

    def steps(self) -> Iterator[tuple[int, pd.DataFrame]]:
        step = self._frame["step"].to_numpy(np.int64)
        if not step.size:
            return
        if bool(np.all(step[1:] >= step[:-1])):
            keys, starts = np.unique(step, return_index=True)
            ends = [*starts[1:], step.size]
            for key, lo, hi in zip(keys, starts, ends, strict=True):
                yield int(key), self._frame.iloc[int(lo):int(hi)]
            return
        order = np.argsort(step, kind="stable")
        keys, starts = np.unique(step[order], return_index=True)
        ends = [*starts[1:], step.size]
        for key, lo, hi in zip(keys, starts, ends, strict=True):
            yield int(key), self._frame.iloc[order[lo:hi]]

    def frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        return self._frame if columns is None else self._frame.loc[:, list(columns)]

    def empty(self) -> pd.DataFrame:
        return self._frame.iloc[0:0]


class ArrowRecords(Records):
    """requests.arrow's first `rows` records and the JSONL tail's batches (Arrow batches of the
    analysis columns, already parsed), read again batch by batch for each pass.

    `step_counts`: records per step value (the first walk's); `nulls`: the columns with a null
    anywhere (an integer column with one is float, as the JSONL reader gives it); `present`: the
    columns with a value anywhere."""

    def __init__(self, arrow: Path, rows: int, tail: list[Any], step_counts: dict[int, int],
                 nulls: set[str], present: set[str]) -> None:
        self._arrow, self._rows, self._tail = arrow, rows, tail
        self._step_counts, self._nulls, self._present = step_counts, nulls, present
        self.count = rows + sum(b.num_rows for b in tail)
        self._whole: pd.DataFrame | None = None

    def has(self, column: str) -> bool:
        return column in self._present

    def _read(self) -> Iterator[Any]:
        """requests.arrow's batches that match the JSONL (the first `rows` records), then the tail's."""
        import pyarrow as pa

        at = 0
        with pa.OSFile(str(self._arrow)) as source:  # read, not mapped: a map's pages would all stay resident
            for batch, _meta in batches(pa, source):
                if at + batch.num_rows > self._rows:
                    break
                at += batch.num_rows
                yield batch
        if at != self._rows:
            raise ValueError(f"{self._arrow.name} changed while it was read")
        yield from self._tail

    def steps(self) -> Iterator[tuple[int, pd.DataFrame]]:
        """Each step's records, handed on as soon as its last one is read: its columns are allocated
        once at their final size (the first walk counted them), filled batch by batch, then dropped."""
        filling: dict[int, tuple[dict[str, np.ndarray], list[int]]] = {}
        left = dict(self._step_counts)
        for batch in self._read():
            cols = batch_columns(batch, COLUMNS)
            step = cols["step"]
            if not step.size:
                continue
            if step[0] == step[-1] and bool(np.all(step == step[0])):
                parts: Iterable[tuple[int, Any]] = [(int(step[0]), slice(None))]
            else:
                parts = [(int(k), step == k) for k in np.unique(step)]
            for key, sel in parts:
                if key not in left:
                    raise ValueError(f"{self._arrow.name} changed while it was read")
                if key not in filling:
                    filling[key] = (self._allocate(COLUMNS, left[key]), [0])
                into, at = filling[key]
                n = 0
                for c in COLUMNS:
                    got = cols[c][sel]
                    n = got.size
                    into[c][at[0]:at[0] + n] = got
                at[0] += n
                left[key] -= n
                if left[key] == 0:
                    # the step's columns referenced only by the frame handed on: once the caller
                    # drops it (before asking for the next), they are freed before the next
                    # step's are allocated — one step's columns at a time, not two
                    done = filling.pop(key)[0]
                    del into
                    yield key, self._framed(done)
                    del done
        for key, (into, at) in filling.items():  # only if the file changed between the walks
            yield key, self._framed({c: v[:at[0]] for c, v in into.items()})

    def frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The whole run's columns (all of them kept once read: the sections that need the run
        whole may ask more than once)."""
        if columns is None and self._whole is not None:
            return self._whole
        names = COLUMNS if columns is None else tuple(columns)
        into = self._allocate(names, self.count)
        at = 0
        for batch in self._read():
            cols = batch_columns(batch, names)
            n = batch.num_rows
            for c in names:
                into[c][at:at + n] = cols[c]
            at += n
        out = self._framed(into)
        if columns is None:
            self._whole = out
        return out

    def empty(self) -> pd.DataFrame:
        return self._framed(self._allocate(COLUMNS, 0))

    def _allocate(self, names: Iterable[str], n: int) -> dict[str, np.ndarray]:
        # integers with nulls as floats until the whole run shows none (as `_typed` gives the JSONL's)
        kinds = {"f": float, "i": float, "b": bool, "s": object}
        return {c: np.empty(n, dtype=np.int64 if c == "step" else kinds[ANALYSIS_COLUMNS[c]]) for c in names}

    def _framed(self, cols: dict[str, np.ndarray]) -> pd.DataFrame:
        frame: dict[str, Any] = {}
        for c, v in cols.items():
            kind = ANALYSIS_COLUMNS[c]
            if kind == "s":
                frame[c] = pd.array(v, dtype="str")
            elif kind == "i" and c != "step" and c not in self._nulls:
                frame[c] = v.astype(np.int64)
            else:
                frame[c] = v
        return pd.DataFrame(frame, copy=False)


def batches(pa: Any, source: Any) -> Iterator[tuple[Any, Any]]:
    """(batch, its custom metadata) of an Arrow stream with requests.arrow's schema, up to its
    first cut batch (a run killed mid-write: the batches before the cut stand)."""
    import pyarrow.ipc

    with pyarrow.ipc.open_stream(source) as reader:
        if not reader.schema.equals(columnar_schema()):
            raise ValueError("not requests.arrow's schema")
        while True:
            try:
                yield reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError):
                return


def batch_columns(batch: Any, names: Iterable[str]) -> dict[str, np.ndarray]:
    """A batch's columns as numpy: step with -1 for none, booleans with False, numbers as floats
    (NaN for none), strings as objects."""
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}
    for c in names:
        col = batch.column(c)
        if c == "step":
            col = pc.fill_null(col, -1)
        elif ANALYSIS_COLUMNS[c] == "b":
            col = pc.fill_null(col, False)
        out[c] = col.to_numpy(zero_copy_only=False)
    return out
