"""requests.jsonl (and the ITL side files of big runs) into arrays: the analysis's record reader.

Only the columns the analysis needs are read (`contracts.records.ANALYSIS_COLUMNS`). When the
records sink's typed copy, requests.arrow, holds exactly the JSONL's records it is read instead
(`read_columnar`): no JSON to parse, the ITL gaps go straight to their steps (analysis/gaps.py),
and the records are read again step by step where the analysis needs them (`ArrowRecords`,
analysis/step_records.py), so a long run's analysis fits in memory bounded by its steps.
`requests.jsonl` goes through pyarrow's multithreaded JSON reader when pyarrow is installed
(1 M records in a few seconds), else through orjson in chunks; either way a corrupt line is
reported as ``requests.jsonl line N``. One exception: a last line without its newline that is not
JSON is what a crash mid-write leaves (the writer appends whole lines): it is skipped and counted,
so the records before it are still analysed.

ITL gaps live either inline (`itl_ms` on each record) or in a side file for big runs:
``itl.jsonl`` or ``itl.parquet``, one row per request attempt with ``request_id`` and
``itl_ms`` (a list), optionally ``step`` and ``warmup`` (else joined on ``request_id``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import orjson
import pandas as pd

from capacity_plugins.analysis.gaps import ITL_DTYPE, Gaps, GapsByStep
from capacity_plugins.analysis.step_records import COLUMNS, ArrowRecords, batch_columns, batches
from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
from capacity_plugins.contracts.records import ANALYSIS_COLUMNS, JSONL_BYTES, JSONL_FROM, columnar_schema
from capacity_plugins.errors import UserError

REQUEST_COLUMNS = ANALYSIS_COLUMNS

# Step tags of tens of millions of ITL gaps fit int16 (< 32 768 steps).
STEP_DTYPE = np.int16


# ---------------------------------------------------------------- requests.jsonl


def _line_start(fh: BinaryIO, end: int) -> int:
    """Where the line holding byte `end - 1` starts: just after the last newline before `end`
    (0 when there is none). Read backwards in blocks: a line with thousands of ITL gaps is long."""
    pos = end
    while pos > 0:
        start = max(0, pos - (1 << 16))
        fh.seek(start)
        i = fh.read(pos - start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def torn_tail(f: Path) -> int | None:
    """Bytes up to the last newline when the file ends in a cut line (no newline, not JSON), else None."""
    size = f.stat().st_size
    if size == 0:
        return None
    with f.open("rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        cut = _line_start(fh, size)
        fh.seek(cut)
        tail = fh.read()
    if not tail.strip():
        return None
    try:
        orjson.loads(tail)
    except orjson.JSONDecodeError:
        return cut
    return None  # a whole record that only lacks its newline: keep it


def _first_bad_line(f: Path, limit: int | None = None) -> tuple[int, str]:
    """Line number (1-based) and reason of the first line that is not a JSON object."""
    with f.open("rb") as fh:
        pos = 0
        for n, line in enumerate(fh, 1):
            pos += len(line)
            if limit is not None and pos > limit:
                break
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                return n, f"invalid JSON ({e})"
            if not isinstance(obj, dict):
                return n, "expected a JSON object"
            for col, kind in REQUEST_COLUMNS.items():
                v = obj.get(col)
                if v is None:
                    continue
                if kind == "f" and (isinstance(v, bool) or not isinstance(v, int | float)):
                    return n, f"field {col}: expected a number, got {v!r}"
                if kind == "i" and (isinstance(v, bool) or not isinstance(v, int)):
                    return n, f"field {col}: expected an integer, got {v!r}"
                if kind == "b" and not isinstance(v, bool):
                    return n, f"field {col}: expected true/false, got {v!r}"
            itl = obj.get("itl_ms")
            if itl is not None and (
                not isinstance(itl, list) or any(isinstance(x, bool) or not isinstance(x, int | float) for x in itl)
            ):
                return n, "field itl_ms: expected a list of numbers"
    return 0, "unreadable"


def _arrow_available() -> bool:
    try:
        import pyarrow.json  # noqa: F401 - only whether it is installed
    except ImportError:
        return False
    return True


def _arrow_source(f: Path, limit: int | None, start: int = 0):
    """The file for pyarrow: its path, or a zero-copy view of its bytes [start, limit) — a torn
    tail left out, or only the lines after what requests.arrow holds."""
    if limit is None and start == 0:
        return f
    import pyarrow as pa

    mm = pa.memory_map(str(f))
    mm.seek(start)
    return pa.BufferReader(mm.read_buffer((f.stat().st_size if limit is None else limit) - start))


def _json_blocks(f: Path, limit: int | None, start: int = 0):
    """requests.jsonl's bytes [start, limit) block by block, as (Arrow batch of the analysis
    columns, float32 gaps, gaps per record): the float64 gap lists of one block at a time are
    alive, not all of them next to their float32 copy (1 M records: ~1.1 GB peak, not ~1.7 GB)."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = columnar_schema(itl=pa.float64())
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    ropts = pj.ReadOptions(block_size=1 << 24)
    src = _arrow_source(f, limit, start)
    reader = pj.open_json(src, read_options=ropts, parse_options=opts) if hasattr(pj, "open_json") else \
        pj.read_json(src, read_options=ropts, parse_options=opts).to_batches()
    for batch in reader:
        values, lens = _flatten_lists(pa.chunked_array([batch.column("itl_ms")]))
        yield batch.drop_columns(["itl_ms"]), values, lens


def _read_requests_arrow(f: Path, with_itl: bool,
                         limit: int | None = None) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None]:
    import pyarrow as pa
    import pyarrow.json as pj

    itl_vals = itl_lens = None
    schema = pa.schema([fd for fd in columnar_schema() if fd.name != "itl_ms"])
    if not with_itl:
        opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        tbl = pj.read_json(_arrow_source(f, limit), read_options=pj.ReadOptions(block_size=1 << 24), parse_options=opts)
    else:
        blocks = list(_json_blocks(f, limit))
        tbl = pa.Table.from_batches([b for b, _v, _n in blocks], schema=schema)
        itl_vals = np.concatenate([v for _b, v, _n in blocks]) if blocks else np.empty(0, ITL_DTYPE)
        itl_lens = np.concatenate([n for _b, _v, n in blocks]) if blocks else np.empty(0, np.int64)
        del blocks
    df = tbl.to_pandas()
    del tbl
    _release_arrow_memory()
    return df, itl_vals, itl_lens


def _flatten_lists(col) -> tuple[np.ndarray, np.ndarray]:
    """(all values, length per row) of a chunked Arrow list column, with one copy of the values."""
    vals, lens = [], []
    for chunk in col.chunks:
        lens.append(chunk.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))
        # float32 lists (requests.arrow) stay zero-copy: a copy of 64 M gaps costs ~1 s of page faults
        vals.append(chunk.flatten().to_numpy(zero_copy_only=False).astype(ITL_DTYPE, copy=False))
    if not vals:
        return np.empty(0), np.empty(0, np.int64)
    return (np.concatenate(vals) if len(vals) > 1 else vals[0]), np.concatenate(lens)


def _parquet_batches(pf):
    """(request ids, float32 gaps, gaps per row) per record batch: one batch of float64 alive at a time."""
    import pyarrow as pa

    for batch in pf.iter_batches(columns=["request_id", "itl_ms"], batch_size=1 << 16):
        col = batch.column("itl_ms")
        rid = batch.column("request_id").to_numpy(zero_copy_only=False)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            v, n = _flatten_lists(pa.chunked_array([col]))
        else:  # long format: one gap per row
            v, n = col.to_numpy(zero_copy_only=False).astype(ITL_DTYPE), np.ones(len(col), dtype=np.int64)
        yield rid, v, n


def _read_itl_jsonl_arrow(js: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("request_id", pa.string()), ("itl_ms", pa.list_(pa.float64()))])
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    ropts = pj.ReadOptions(block_size=1 << 24)
    reader = pj.open_json(js, read_options=ropts, parse_options=opts) if hasattr(pj, "open_json") else \
        pj.read_json(js, read_options=ropts, parse_options=opts).to_batches()
    vals, lens, rids = [], [], []
    for batch in reader:
        v, n = _flatten_lists(pa.chunked_array([batch.column("itl_ms")]))
        vals.append(v)
        lens.append(n)
        rids.append(batch.column("request_id").to_numpy(zero_copy_only=False))
    _release_arrow_memory()
    if not vals:
        return np.empty(0, ITL_DTYPE), np.empty(0, np.int64), np.empty(0, object)
    return np.concatenate(vals), np.concatenate(lens), np.concatenate(rids)


def _release_arrow_memory() -> None:
    """Hand Arrow's freed parse buffers back to the OS (its allocator keeps them otherwise)."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # older pyarrow: nothing to release
        pass


def _coerce(values: list, kind: str) -> np.ndarray | list:
    if kind == "f":
        return np.array([math.nan if v is None else v for v in values], dtype=float)
    if kind == "i":
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)
    if kind == "b":
        return np.array([bool(v) for v in values], dtype=bool)
    return values


def _read_requests_orjson(f: Path, with_itl: bool,
                          limit: int | None = None) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None]:
    import itertools

    cols: dict[str, list] = {c: [] for c in REQUEST_COLUMNS}
    itl_parts: list[np.ndarray] = []
    lens: list[int] = []
    with f.open("rb") as fh:
        while True:
            lines = fh.readlines(1 << 24)
            if not lines:
                break
            if limit is not None:  # the torn tail is the one line without its newline
                lines = [ln for ln in lines if ln.endswith(b"\n")]
            chunk = [ln for ln in lines if ln.strip()]
            if not chunk:
                continue
            # One orjson call per chunk: per-line calls cost more than the parsing itself.
            recs = orjson.loads(b"[" + b",".join(chunk) + b"]")
            if not all(isinstance(r, dict) for r in recs):
                raise ValueError("not an object")
            for c in cols:
                cols[c].extend([r.get(c) for r in recs])
            if with_itl:
                lists = [r.get("itl_ms") or () for r in recs]
                ln = [len(x) for x in lists]
                lens.extend(ln)
                itl_parts.append(np.fromiter(itertools.chain.from_iterable(lists), ITL_DTYPE, count=sum(ln)))
    data = {c: _coerce(v, REQUEST_COLUMNS[c]) for c, v in cols.items()}
    df = pd.DataFrame(data)
    if not with_itl:
        return df, None, None
    vals = np.concatenate(itl_parts) if itl_parts else np.empty(0)
    return df, vals, np.asarray(lens, dtype=np.int64)


def read_requests(f: Path, with_itl: bool) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None, bool]:
    """(records, ITL gaps, gaps per record, whether a torn last line was skipped)."""
    if not f.exists():
        raise UserError(f"{f}: missing (a results folder needs requests.jsonl)")
    limit = torn_tail(f)
    with f.open("rb") as fh:
        head = fh.read(min(4096, limit) if limit is not None else 4096)
    if not head.strip():
        empty = pd.DataFrame({c: _coerce([], k) for c, k in REQUEST_COLUMNS.items()})
        return empty, (np.empty(0) if with_itl else None), (np.empty(0, np.int64) if with_itl else None), limit is not None
    reader = _read_requests_arrow if _arrow_available() else _read_requests_orjson
    try:
        df, vals, lens = reader(f, with_itl, limit)
    except Exception:
        raise _bad_line_error(f, limit) from None
    return _typed(df), vals, lens, limit is not None


def _bad_line_error(f: Path, limit: int | None) -> UserError:
    """The readers fail on the first bad line without saying which: find it once."""
    n, why = _first_bad_line(f, limit)
    if n:
        return UserError(f"{f.name} line {n}: {why}")
    return UserError(f"{f.name}: could not be read (mixed field types?)")


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """The dtypes every reader hands on: step int64 (-1 = none), bools without nulls, floats."""
    df["step"] = df["step"].fillna(-1).astype(np.int64)
    for c, k in REQUEST_COLUMNS.items():
        if k == "b":
            df[c] = df[c].fillna(False).astype(bool)
        elif k == "f":
            df[c] = df[c].astype(float)
    return df


# ---------------------------------------------------------------- requests.arrow (sinks/columnar.py)


def _last_request_id(f: Path, size: int) -> Any:
    """request_id of the line that ends (its newline included) at byte `size` of requests.jsonl."""
    with f.open("rb") as fh:
        start = _line_start(fh, size - 1)
        fh.seek(start)
        line = fh.read(size - 1 - start)
    return orjson.loads(line).get("request_id")


class Columnar(NamedTuple):
    records: ArrowRecords
    itl: dict[int, Gaps]
    # Records read from requests.jsonl after the copy's last batch (a run killed before writing
    # it, or lines another writer added), and whether the JSONL's last line was cut.
    jsonl_tail: int
    torn: bool


def read_columnar(path: Path, step_indexes: list[int]) -> Columnar | None:
    """The records and each measured step's ITL gaps from requests.arrow for the part of
    requests.jsonl it holds exactly, and from the JSONL for the lines after that part; None when
    it holds no such part — no file, no pyarrow, a copy that starts after the JSONL does or whose
    last record is not the JSONL's line there (a file edited since) — and the JSONL is read instead.

    "Exactly": each batch carries the byte range its records take in requests.jsonl
    (sinks/columnar.py); the batches read must cover the file from its first byte without a gap,
    and their last record must be the JSONL's line that ends where they do. A run killed before
    its last batch was written, or between the batches' records and a gap in the JSONL's (a batch
    never spans one), leaves lines after that: only those are parsed, so a killed long soak is
    read in memory bounded as a whole one is, not as its whole JSONL would need.

    Two walks here, so memory holds the steps' gaps, never the file nor the records' columns:
    the first walks the batch headers through a memory map (their bodies untouched) to check the
    ranges and count the rows; the second reads batch by batch from the file (a map's pages would
    all stay resident) for each step's gaps and the records per step. The records themselves are
    read again step by step where the analysis needs them (`ArrowRecords`, step_records.py).
    """
    arrow, jsonl = path / COLUMNAR_FILE, path / RECORDS_FILE
    if not arrow.exists() or not jsonl.exists() or not _arrow_available():
        return None
    import pyarrow as pa

    try:
        prefix = _columnar_prefix(pa, arrow, jsonl)
        if prefix is None:
            return None
        rows, covered = prefix
        limit = torn_tail(jsonl)
        end = jsonl.stat().st_size if limit is None else limit
        if covered > end:
            return None
        tail = _jsonl_tail(jsonl, covered, end)
        got = _walk_columnar(pa, arrow, rows, step_indexes, tail)
    except (pa.ArrowInvalid, OSError, ValueError):
        return None
    _release_arrow_memory()
    if got is None:
        return None
    return Columnar(*got, jsonl_tail=sum(b.num_rows for b, _v, _n in tail), torn=limit is not None)


def _columnar_prefix(pa: Any, arrow: Path, jsonl: Path) -> tuple[int, int] | None:
    """(records, bytes of requests.jsonl they take) of requests.arrow's batches that cover the
    JSONL from its first byte without a gap, or None when there are none or they do not match it."""
    rows, size, last = 0, 0, None
    with pa.memory_map(str(arrow)) as source:
        for batch, meta in batches(pa, source):
            if meta is None or int(meta.get(JSONL_FROM, -1)) != size:
                break  # a gap (records this file never got), or no range at all: the JSONL from here
            size = int(meta[JSONL_BYTES])
            if batch.num_rows:
                rows += batch.num_rows
                last = batch.column("request_id")[-1].as_py()
    if last is None or size > jsonl.stat().st_size:
        return None
    try:
        return (rows, size) if _last_request_id(jsonl, size) == last else None
    except (orjson.JSONDecodeError, AttributeError, OSError):
        return None


def _jsonl_tail(jsonl: Path, start: int, end: int) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """requests.jsonl's records in bytes [start, end) as (Arrow batch of the analysis columns,
    float32 gaps, gaps per record), the float64 gap lists of one block alive at a time."""
    with jsonl.open("rb") as fh:
        fh.seek(start)
        if not fh.read(min(4096, end - start)).strip():
            return []
    try:
        return list(_json_blocks(jsonl, end, start))
    except Exception:  # as read_requests: whatever pyarrow raises, the one-line error
        raise _bad_line_error(jsonl, end) from None


def _walk_columnar(pa: Any, arrow: Path, rows: int, step_indexes: list[int],
                   tail: list[tuple[Any, np.ndarray, np.ndarray]]) -> tuple[ArrowRecords, dict[int, Gaps]] | None:
    """The first walk over the records: each measured step's gaps, the records per step value and
    which columns have nulls or values anywhere — what the later walks, step by step, need known
    before they start (step_records.py). No column is kept: memory holds the steps' gaps only."""
    gaps = GapsByStep(step_indexes)
    counts: dict[int, int] = {}
    nulls: set[str] = set()
    present: set[str] = set()
    at = 0

    def take(batch: Any, values: np.ndarray, lens: np.ndarray) -> None:
        n = batch.num_rows
        for c in COLUMNS:
            had = batch.column(c).null_count
            if had:
                nulls.add(c)
            if had < n:
                present.add(c)
        cols = batch_columns(batch, ("ok", "warmup", "step"))
        keys, k = np.unique(cols["step"], return_counts=True)
        for key, m in zip(keys.tolist(), k.tolist(), strict=True):
            counts[key] = counts.get(key, 0) + m
        _add_gaps(gaps, values, lens, cols)

    with pa.OSFile(str(arrow)) as source:
        for batch, _meta in batches(pa, source):
            if at + batch.num_rows > rows:
                break  # past the part that matches the JSONL (or the file grew between the passes)
            itl = batch.column("itl_ms")
            take(batch, itl.flatten().to_numpy(zero_copy_only=False),
                 itl.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
            at += batch.num_rows
    if at != rows:
        return None
    for batch, values, lens in tail:
        take(batch, values, lens)
    return ArrowRecords(arrow, rows, [b for b, _v, _n in tail], counts, nulls, present), gaps.finish()


def _add_gaps(gaps: GapsByStep, values: np.ndarray, lens: np.ndarray, cols: dict[str, np.ndarray]) -> None:
    """Hand a batch's gaps (float32, `lens` per record) of measured, successful requests to their steps."""
    good = cols["ok"] & ~cols["warmup"]
    tag = np.where(good, cols["step"], -1)
    per_gap = np.repeat(tag, lens)
    for index in np.unique(tag):
        if index >= 0 and gaps.wants(int(index)):
            gaps.add(int(index), values[per_gap == index])  # boolean selection: a copy


def read_itl_side(path: Path, req: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(values, per-gap step, per-gap measured-ok mask) from itl.parquet / itl.jsonl, if present."""
    pq, js = path / "itl.parquet", path / "itl.jsonl"
    if pq.exists():
        try:
            import pyarrow.parquet as papq
        except ImportError:
            raise UserError("itl.parquet: reading it needs pyarrow (pip install pyarrow)") from None
        try:
            pf = papq.ParquetFile(pq)
            batches = list(_parquet_batches(pf))
        except Exception as e:
            raise UserError(f"itl.parquet: cannot read, needs columns request_id and itl_ms ({type(e).__name__})") from None
        rid = np.concatenate([b[0] for b in batches]) if batches else np.empty(0, object)
        vals = np.concatenate([b[1] for b in batches]) if batches else np.empty(0, ITL_DTYPE)
        lens = np.concatenate([b[2] for b in batches]) if batches else np.empty(0, np.int64)
        del batches
        _release_arrow_memory()
    elif js.exists():
        got = None
        if _arrow_available():
            try:
                got = _read_itl_jsonl_arrow(js)
            except Exception:
                got = None  # fall through to the line-by-line reader, which names the bad line
        if got is None:
            got = _read_itl_jsonl_lines(js)
        vals, lens, rid = got
    else:
        return None
    req_ids = req["request_id"].to_numpy()
    if len(rid) == len(req_ids) and bool(np.all(rid == req_ids)):
        # written side by side, in the same order: no join needed
        step, good = req["step"].to_numpy(), req["ok"].to_numpy() & ~req["warmup"].to_numpy()
    else:
        key = req.set_index(req["request_id"].astype(str))
        key = key[~key.index.duplicated(keep="last")]
        idx = key.index.get_indexer(np.asarray(rid).astype(str))
        found = idx >= 0
        step = np.where(found, key["step"].to_numpy()[idx], -1)
        good = found & (key["ok"].to_numpy()[idx]) & ~(key["warmup"].to_numpy()[idx])
    return vals, np.repeat(np.where(good, step, -1).astype(STEP_DTYPE), lens), np.repeat(good, lens)


def _read_itl_jsonl_lines(js: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import itertools

    rids: list[str] = []
    lens_l: list[int] = []
    parts: list[np.ndarray] = []
    with js.open("rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                r = orjson.loads(line)
                lst = r["itl_ms"] or []
                rids.append(str(r["request_id"]))
                lens_l.append(len(lst))
                parts.append(np.fromiter(itertools.chain(lst), ITL_DTYPE, count=len(lst)))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                raise UserError(f'itl.jsonl line {n}: expected {{"request_id": ..., "itl_ms": [numbers]}}') from None
    vals = np.concatenate(parts) if parts else np.empty(0)
    return vals, np.asarray(lens_l, dtype=np.int64), np.asarray(rids, dtype=object)
