"""Corpus files: JSONL (also gzipped), CSV, ShareGPT / JSON lists and Parquet → samples.

- ``.jsonl`` (also ``.jsonl.gz``): one ``{"prompt": str}`` or ``{"messages": [{"role",
  "content"}, ...]}`` object per line and optional ``"max_tokens"`` / ``"id"`` / ``"images"`` (a
  list of image paths, relative to the corpus file's folder, or URLs: corpus/images.py).
- ``.csv``: a ``prompt`` column (optional ``max_tokens`` / ``id``).
- ShareGPT ``.json`` (a list of ``{"id", "conversations": [{"from": "human", "value"}, ...]}``):
  the first human turn is the prompt, and, as vLLM's benchmark does, the following reply's
  estimated length becomes ``max_tokens``; or a ``.json`` list of JSONL-style objects.
- ``.parquet``: columns as for CSV (needs pyarrow).

Every error is a one-line `UserError` naming the file and line, row or item
(``corpus.jsonl:17: missing "prompt" or "messages"``).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.corpus.images import corpus_images
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.text import content_text, estimate_tokens
from capacity_plugins.errors import UserError

FILE_KINDS = (".jsonl", ".jsonl.gz", ".csv", ".json", ".parquet")


def read_file(path: Path, label: str) -> tuple[list[Sample], str]:
    """The samples of a corpus file and the SHA-256 of its bytes as stored (compressed or not)."""
    name = path.name.lower()
    kind = next((k for k in FILE_KINDS if name.endswith(k)), None)
    if kind is None:
        raise UserError(f"{label}: unknown corpus format (expected one of {', '.join(FILE_KINDS)}, "
                        f"'builtin', 'builtin:long' or 'synthetic:...')")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{label}: no such corpus file") from None
    except OSError as e:
        raise UserError(f"{label}: cannot read ({e.strerror or e})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if kind == ".jsonl.gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise UserError(f"{label}: not a valid gzip file ({e})") from None
    if kind in (".jsonl", ".jsonl.gz"):
        samples = parse_jsonl(raw, label, max_tokens_field=True, base=path.parent)
    elif kind == ".csv":
        samples = _parse_csv(raw, label)
    elif kind == ".json":
        samples = _parse_json(raw, label, path.parent)
    else:
        samples = _parse_parquet(path, label)
    return samples, digest


def _decode(raw: bytes, label: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(f"{label}:{line}: not valid UTF-8 (byte {e.start})") from None


class _Ids:
    """Checks id uniqueness: prompt ids end up in requests.jsonl and must name one prompt."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.seen: dict[str, str] = {}

    def take(self, raw_id: Any, default: str, where: str) -> str:
        if raw_id is None:
            pid = default
        elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
            pid = str(raw_id)
        else:
            raise UserError(f"{self.label}:{where}: \"id\" must be a string or an integer")
        if pid in self.seen:
            raise UserError(f"{self.label}:{where}: duplicate id {pid!r} (first at {self.seen[pid]})")
        self.seen[pid] = where
        return pid


def _max_tokens(value: Any, label: str, where: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}") from None
    if not isinstance(value, int) or value < 1:
        raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}")
    return value


def _validate_messages(msgs: Any, label: str, where: str) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise UserError(f"{label}:{where}: \"messages\" must be a non-empty list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise UserError(f"{label}:{where}: messages[{i}] needs a \"role\" string")
        c = m.get("content")
        if not isinstance(c, (str, list)):
            raise UserError(f"{label}:{where}: messages[{i}] needs a \"content\" string (or list of parts)")
    if not any(content_text(m.get("content")).strip() for m in msgs):
        raise UserError(f"{label}:{where}: \"messages\" have no text")
    return msgs


def _sample_from_obj(obj: Any, label: str, where: str, default_id: str, ids: _Ids,
                     max_tokens_field: bool, base: Path | None = None) -> Sample:
    if not isinstance(obj, dict):
        raise UserError(f"{label}:{where}: expected a JSON object, got {type(obj).__name__}")
    has_p, has_m = "prompt" in obj, "messages" in obj
    if has_p and has_m:
        raise UserError(f"{label}:{where}: has both \"prompt\" and \"messages\"; keep one")
    if not has_p and not has_m:
        raise UserError(f"{label}:{where}: missing \"prompt\" or \"messages\"")
    pid = ids.take(obj.get("id"), default_id, where)
    mt = _max_tokens(obj.get("max_tokens"), label, where) if max_tokens_field else None
    images = corpus_images(obj["images"], base, label, where) if obj.get("images") is not None else ()
    if has_p:
        p = obj["prompt"]
        if not isinstance(p, str) or not p.strip():
            raise UserError(f"{label}:{where}: \"prompt\" must be a non-empty string")
        return Sample.make(pid, prompt=p, max_tokens=mt, images=images)
    return Sample.make(pid, messages=_validate_messages(obj["messages"], label, where), max_tokens=mt, images=images)


def parse_jsonl(raw: bytes, label: str, *, max_tokens_field: bool, base: Path | None = None) -> list[Sample]:
    """JSONL bytes → samples; also how the generated sets (builtin, long, synthetic) are read back."""
    text = _decode(raw, label)
    ids = _Ids(label)
    out: list[Sample] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise UserError(f"{label}:{lineno}: invalid JSON ({str(e).split(':')[0]})") from None
        out.append(_sample_from_obj(obj, label, str(lineno), str(lineno), ids, max_tokens_field, base))
    return out


def to_jsonl(records: list[dict[str, Any]]) -> bytes:
    """Records → JSONL bytes, the form the generated sets are hashed and read back in."""
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _rows_to_samples(rows: list[tuple[str, dict[str, Any]]], columns: list[str], label: str) -> list[Sample]:
    lower = {c.strip().lower(): c for c in columns if c is not None}
    if "prompt" not in lower:
        raise UserError(f"{label}:1: no \"prompt\" column (columns: {', '.join(map(str, columns)) or 'none'})")
    pc, mc, ic = lower["prompt"], lower.get("max_tokens"), lower.get("id")
    ids = _Ids(label)
    out = []
    for where, row in rows:
        p = row.get(pc)
        if not isinstance(p, str) or not p.strip():
            raise UserError(f"{label}:{where}: empty \"prompt\"")
        raw_id = row.get(ic) if ic else None
        if raw_id == "" or (isinstance(raw_id, float) and math.isnan(raw_id)):
            raw_id = None
        if isinstance(raw_id, float) and raw_id.is_integer():
            raw_id = int(raw_id)
        mt_raw = row.get(mc) if mc else None
        if isinstance(mt_raw, float) and math.isnan(mt_raw):
            mt_raw = None
        pid = ids.take(raw_id, where, where)
        out.append(Sample.make(pid, prompt=p, max_tokens=_max_tokens(mt_raw, label, where)))
    return out


def _parse_csv(raw: bytes, label: str) -> list[Sample]:
    text = _decode(raw, label)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns = list(reader.fieldnames or [])
        rows = []
        start = reader.line_num + 1
        for row in reader:
            rows.append((str(start), row))
            start = reader.line_num + 1  # multi-line quoted cells: name the row's first line
    except csv.Error as e:
        raise UserError(f"{label}:{reader.line_num}: bad CSV ({e})") from None
    if not columns:
        raise UserError(f"{label}: empty file (no header row)")
    return _rows_to_samples(rows, columns, label)


def _parse_parquet(path: Path, label: str) -> list[Sample]:
    try:
        import pyarrow  # noqa: F401 - only whether it is installed (pandas reads the file with it)
    except ImportError:
        raise UserError(f"{label}: reading Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    import pandas as pd

    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises many types for a bad file; report it as bad input
        raise UserError(f"{label}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    rows = [(f"row {i + 1}", {k: (v.item() if hasattr(v, "item") else v) for k, v in rec.items()})
            for i, rec in enumerate(df.to_dict("records"))]
    return _rows_to_samples(rows, [str(c) for c in df.columns], label)


def _parse_json(raw: bytes, label: str, base: Path) -> list[Sample]:
    text = _decode(raw, label)
    if not text.strip():
        raise UserError(f"{label}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{label}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise UserError(f"{label}: expected a JSON list (ShareGPT format or prompt objects), got {type(data).__name__}")
    ids = _Ids(label)
    out = []
    for i, item in enumerate(data):
        where = f"item {i}"
        if isinstance(item, dict) and "conversations" in item:
            s = _sharegpt_sample(item, label, where, ids)
            if s is not None:
                out.append(s)
        else:
            out.append(_sample_from_obj(item, label, where, str(i), ids, True, base))
    return out


def _sharegpt_sample(item: dict[str, Any], label: str, where: str, ids: _Ids) -> Sample | None:
    conv = item["conversations"]
    if not isinstance(conv, list):
        raise UserError(f"{label}:{where}: \"conversations\" must be a list")
    for j, turn in enumerate(conv):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise UserError(f"{label}:{where}: conversations[{j}] needs \"from\" and a \"value\" string")
        if turn.get("from") in ("human", "user") and turn["value"].strip():
            reply = conv[j + 1] if j + 1 < len(conv) else None
            mt = None
            if isinstance(reply, dict) and reply.get("from") in ("gpt", "assistant", "chatgpt", "bard") \
                    and isinstance(reply.get("value"), str) and reply["value"].strip():
                mt = estimate_tokens(reply["value"])
            pid = ids.take(item.get("id"), where.replace("item ", ""), where)
            return Sample.make(pid, prompt=turn["value"], max_tokens=mt)
    return None  # ShareGPT dumps contain conversations with no human turn; vLLM skips them too
