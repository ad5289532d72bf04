"""Read a results folder into arrays the analysis can work on (no Locust, no gevent).

Only the columns the analysis needs are read. `requests.jsonl` goes through pyarrow's
multithreaded JSON reader when pyarrow is installed (1 M records in a few seconds), else
through orjson in chunks; either way a corrupt line is reported as ``requests.jsonl line N``.

ITL gaps live either inline (`itl_ms` on each record) or in a side file for big runs:
``itl.jsonl`` or ``itl.parquet``, one row per request attempt with ``request_id`` and
``itl_ms`` (a list), optionally ``step`` and ``warmup`` (else joined on ``request_id``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import yaml
from pydantic import ValidationError

from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig
from capacity_plugins.contracts.records import ANALYSIS_COLUMNS
from capacity_plugins.contracts.steps import STEPS_FILE, StepRow
from capacity_plugins.errors import UserError

# The record columns the analysis reads and their JSON kinds (the contract names them once).
REQUEST_COLUMNS = ANALYSIS_COLUMNS

# Tens of millions of ITL gaps: float32 keeps 7 significant digits (far below a microsecond for
# gaps in ms) at half the memory and partition time; step tags fit int16 (< 32 768 steps).
ITL_DTYPE = np.float32
STEP_DTYPE = np.int16

# One row of steps.json (the load side writes it, the analysis reads it: one definition).
Step = StepRow


@dataclass
class RunData:
    """Everything the analysis reads, loaded once."""

    path: Path
    requests: pd.DataFrame  # one row per attempt, REQUEST_COLUMNS (strings as object)
    itl_values: np.ndarray  # every ITL gap (ms) of measured, successful requests
    itl_steps: np.ndarray  # step index per gap (same length), -1 outside a step
    steps: list[Step]
    meta: dict[str, Any]
    name: str | None
    load_kind: str | None
    slo: SLOConfig
    capacity: CapacityConfig
    telemetry: pd.DataFrame | None  # telemetry_series.csv, or None
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- small file readers


def _read_json_file(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise UserError(f"{path.name}: invalid JSON ({e})") from None
    except OSError as e:
        raise UserError(f"{path.name}: cannot read ({e.strerror})") from None


def read_steps(path: Path) -> list[Step]:
    f = path / STEPS_FILE
    if not f.exists():
        raise UserError(f"{f}: missing (a results folder needs {STEPS_FILE})")
    doc = _read_json_file(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise UserError(f"{f.name}: expected an object with a 'steps' list")
    out = []
    for i, raw in enumerate(doc["steps"]):
        if isinstance(raw, dict) and "index" not in raw:
            raw = {**raw, "index": i}
        out.append(StepRow.from_json(raw, f"{STEPS_FILE}: steps[{i}]"))
    return out


def read_scenario(path: Path) -> tuple[str | None, str | None, dict, dict]:
    f = path / "scenario.yaml"
    if not f.exists():
        return None, None, {}, {}
    try:
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"scenario.yaml{line}: invalid YAML") from None
    if not isinstance(doc, dict):
        raise UserError("scenario.yaml: expected a mapping at the top level")
    load: dict = doc["load"] if isinstance(doc.get("load"), dict) else {}
    slo = doc.get("slo") or {}
    cap = doc.get("capacity") or {}
    if not isinstance(slo, dict):
        raise UserError("scenario.yaml: slo: expected a mapping")
    if not isinstance(cap, dict):
        raise UserError("scenario.yaml: capacity: expected a mapping")
    return doc.get("name"), load.get("kind"), slo, cap


def build_configs(slo: dict, cap: dict, overrides: dict | None, source: str) -> tuple[SLOConfig, CapacityConfig]:
    """Scenario sections with flag overrides on top, validated together (one line per error)."""
    slo = dict(slo)
    cap = dict(cap)
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k in SLOConfig.model_fields:
            slo[k] = v
        elif k in CapacityConfig.model_fields:
            cap[k] = v
        else:
            raise UserError(f"unknown override {k!r}")
    out = []
    for section, model, data in (("slo", SLOConfig, slo), ("capacity", CapacityConfig, cap)):
        try:
            out.append(model(**data))
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{source}: {section}.{loc}: {err['msg']}") from None
    return out[0], out[1]  # type: ignore[return-value]


# ---------------------------------------------------------------- requests.jsonl


def _first_bad_line(f: Path) -> tuple[int, str]:
    """Line number (1-based) and reason of the first line that is not a JSON object."""
    with f.open("rb") as fh:
        for n, line in enumerate(fh, 1):
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
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


def _read_requests_arrow(f: Path, with_itl: bool) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None]:
    import pyarrow as pa
    import pyarrow.json as pj

    types = {"f": pa.float64(), "b": pa.bool_(), "s": pa.string(), "i": pa.int64()}
    fields = [(c, types[k]) for c, k in REQUEST_COLUMNS.items()]
    if with_itl:
        fields.append(("itl_ms", pa.list_(pa.float64())))
    schema = pa.schema(fields)
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    ropts = pj.ReadOptions(block_size=1 << 24)
    itl_vals = itl_lens = None
    if not with_itl:
        tbl = pj.read_json(f, read_options=ropts, parse_options=opts)
    else:
        # Stream block by block so the float64 ITL lists of one block at a time are alive, not
        # all of them next to their float32 copy (1 M records: ~1.1 GB peak instead of ~1.7 GB).
        batches, vals, lens = [], [], []
        reader = pj.open_json(f, read_options=ropts, parse_options=opts) if hasattr(pj, "open_json") else \
            pj.read_json(f, read_options=ropts, parse_options=opts).to_batches()
        for batch in reader:
            v, n = _flatten_lists(pa.chunked_array([batch.column("itl_ms")]))
            vals.append(v)
            lens.append(n)
            batches.append(batch.drop_columns(["itl_ms"]))
        out_schema = pa.schema([fd for fd in schema if fd.name != "itl_ms"])
        tbl = pa.Table.from_batches(batches, schema=out_schema)
        itl_vals = np.concatenate(vals) if vals else np.empty(0, ITL_DTYPE)
        itl_lens = np.concatenate(lens) if lens else np.empty(0, np.int64)
    df = tbl.to_pandas()
    del tbl
    _release_arrow_memory()
    return df, itl_vals, itl_lens


def _flatten_lists(col) -> tuple[np.ndarray, np.ndarray]:
    """(all values, length per row) of a chunked Arrow list column, with one copy of the values."""
    vals, lens = [], []
    for chunk in col.chunks:
        lens.append(chunk.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))
        vals.append(chunk.flatten().to_numpy(zero_copy_only=False).astype(ITL_DTYPE))
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


def _read_requests_orjson(f: Path, with_itl: bool) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None]:
    import itertools

    cols: dict[str, list] = {c: [] for c in REQUEST_COLUMNS}
    itl_parts: list[np.ndarray] = []
    lens: list[int] = []
    with f.open("rb") as fh:
        while True:
            chunk = [ln for ln in fh.readlines(1 << 24) if ln.strip()]
            if not chunk:
                break
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


def read_requests(f: Path, with_itl: bool) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray | None]:
    if not f.exists():
        raise UserError(f"{f}: missing (a results folder needs requests.jsonl)")
    with f.open("rb") as fh:
        head = fh.read(4096)
    if not head.strip():
        empty = pd.DataFrame({c: _coerce([], k) for c, k in REQUEST_COLUMNS.items()})
        return empty, (np.empty(0) if with_itl else None), (np.empty(0, np.int64) if with_itl else None)
    reader = _read_requests_arrow if _arrow_available() else _read_requests_orjson
    try:
        df, vals, lens = reader(f, with_itl)
    except Exception:
        # Either reader fails on the first bad line without saying which; find it once.
        n, why = _first_bad_line(f)
        if n:
            raise UserError(f"{f.name} line {n}: {why}") from None
        raise UserError(f"{f.name}: could not be read (mixed field types?)") from None
    df["step"] = df["step"].fillna(-1).astype(np.int64)
    for c, k in REQUEST_COLUMNS.items():
        if k == "b":
            df[c] = df[c].fillna(False).astype(bool)
        elif k == "f":
            df[c] = df[c].astype(float)
    return df, vals, lens


def _read_itl_side(path: Path, req: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
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


def load_run(path: Path, overrides: dict | None = None, progress=None) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: not a results folder (no such directory)")
    say = progress or (lambda _msg: None)
    warnings: list[str] = []
    steps = read_steps(path)
    name, load_kind, slo_raw, cap_raw = read_scenario(path)
    slo, cap = build_configs(slo_raw, cap_raw, overrides, "scenario.yaml" if slo_raw or cap_raw else "options")

    meta: dict[str, Any] = {}
    if (path / "meta.json").exists():
        meta = _read_json_file(path / "meta.json")
        if not isinstance(meta, dict):
            raise UserError("meta.json: expected a JSON object")
    else:
        warnings.append("meta.json missing: provenance (versions, model, GPU) unknown")
    # The load side writes `complete: false` (+ `incomplete_reason`); older folders and synthetic
    # ones may say `incomplete: true`. Both mean the same here.
    if meta.get("complete") is False:
        meta["incomplete"] = True
    if meta.get("incomplete"):
        reason = meta.get("incomplete_reason") or "interrupted"
        warnings.append(f"the run is incomplete ({reason}): the last step may be partial")

    side = (path / "itl.parquet").exists() or (path / "itl.jsonl").exists()
    f = path / "requests.jsonl"
    say(f"reading {f.name} ({f.stat().st_size / 1e6:.0f} MB)" if f.exists() else "reading requests.jsonl")
    req, vals, lens = read_requests(f, with_itl=not side)
    say(f"read {len(req):,} request records")
    if side:
        got = _read_itl_side(path, req)
        assert got is not None
        itl_vals, itl_steps, good = got
        if not bool(good.all()):
            itl_vals, itl_steps = itl_vals[good], itl_steps[good]
    else:
        assert vals is not None and lens is not None
        good_req = req["ok"].to_numpy() & ~req["warmup"].to_numpy()
        step_req = np.where(good_req, req["step"].to_numpy(), -1).astype(STEP_DTYPE)
        itl_steps = np.repeat(step_req, lens)
        itl_vals = vals
        if not bool(good_req.all()) or bool((step_req < 0).any()):
            keep = itl_steps >= 0
            itl_vals, itl_steps = vals[keep], itl_steps[keep]

    telemetry = None
    tf = path / "telemetry_series.csv"
    if tf.exists():
        try:
            telemetry = pd.read_csv(tf, usecols=lambda c: c in {"unix", "step", "host", "device", "series", "value", "unit"})
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
            raise UserError(f"telemetry_series.csv: cannot parse ({str(e).splitlines()[0]})") from None
        missing = {"unix", "series", "value"} - set(telemetry.columns)
        if missing:
            raise UserError(f"telemetry_series.csv: missing column(s) {', '.join(sorted(missing))}")
        telemetry["value"] = pd.to_numeric(telemetry["value"], errors="coerce")
        telemetry["unix"] = pd.to_numeric(telemetry["unix"], errors="coerce")
        if "step" in telemetry.columns:
            telemetry["step"] = pd.to_numeric(telemetry["step"], errors="coerce")
    records: dict = meta["records"] if isinstance(meta.get("records"), dict) else {}
    lost = records.get("lost") or meta.get("lost_records")
    if lost:
        warnings.append(f"meta.json: {lost} request records were lost by the writer (percentiles may be biased)")

    return RunData(
        path=path, requests=req, itl_values=np.asarray(itl_vals, dtype=ITL_DTYPE), itl_steps=np.asarray(itl_steps),
        steps=steps, meta=meta, name=name, load_kind=load_kind, slo=slo, capacity=cap, telemetry=telemetry,
        warnings=warnings,
    )


def dumps_json(obj: Any) -> str:
    """JSON text with NaN/inf as null (summary.json is read by other tools)."""

    def clean(o: Any) -> Any:
        if isinstance(o, float):
            return None if not math.isfinite(o) else o
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [clean(v) for v in o]
        if isinstance(o, np.generic):
            return clean(o.item())
        return o

    return json.dumps(clean(obj), indent=2, ensure_ascii=False)
