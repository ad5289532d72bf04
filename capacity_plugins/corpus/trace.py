"""Request traces: read a JSONL trace, cut it into replay windows, synthesise each request's prompt.

A trace is one JSON object per line (Mooncake's format, plus optional fields):

| field | | meaning |
|---|---|---|
| `timestamp` | required | arrival time in **milliseconds** (any origin; the first request is t = 0; need not be sorted) |
| `input_length` | required unless `prompt` | prompt length in tokens |
| `output_length` | required | output length in tokens: the request's `max_tokens` |
| `hash_ids` | optional | ids of the prompt's blocks of `block_tokens` tokens (512 unless the load says otherwise): the same id at the same place = the same text, so requests sharing a prefix share ids |
| `prompt` | optional | the prompt text itself (sent as is; `hash_ids` are then ignored) |
| `session_id`, `class` | optional | kept on the request (not used for scheduling) |

The prompt of a request with `hash_ids` is the concatenation of one text block per id (each exactly
`block_tokens` tokens by the estimate every part of this project counts with: 4 characters a token),
cut to `input_length`; a longer `input_length` is filled with text unique to the request. A block's
text depends only on its id, so equal ids give byte-equal prefixes and a server's prefix cache sees
the sharing the trace recorded. Block texts are a whole number of 4-character units, so the
simulator's 16-token prefix-cache blocks line up with them.

Replay (`trace_windows`): the chosen span `[start_s, start_s + duration_s)` of trace time (looped
when `loop` and longer than the trace), played `speedup` times faster, in consecutive windows of
`window_s` trace seconds. Each window is one step: its arrivals are offsets (wall seconds from the
step's start) and the request each one sends.

No Locust here: the runner checks a trace before anything starts, and the tests read it plainly.
"""

from __future__ import annotations

import functools
import math
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.synthetic import synthetic_text
from capacity_plugins.errors import UserError

# Mooncake's traces hash prompts in blocks of 512 tokens.
DEFAULT_BLOCK_TOKENS = 512
CHARS_PER_TOKEN = 4  # the project's token estimate (corpus/text.py, simulator/tokens.py)


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()
    prompt: str | None = None
    session_id: str | None = None
    cls: str | None = None
    line: int = 0  # where it came from (1-based), for messages


def _bad(path: str, line: int, field: str, msg: str) -> UserError:
    return UserError(f"{path}:{line}: {field}: {msg}")


def _int_field(obj: dict[str, Any], key: str, path: str, line: int, *, required: bool) -> int | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise _bad(path, line, key, "missing")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or v < 1:
        raise _bad(path, line, key, f"must be a whole number ≥ 1, got {v!r}")
    return int(v)


def parse_request(obj: Any, path: str, line: int) -> TraceRequest:
    """One trace line (already JSON-decoded) → a TraceRequest; a bad field is one UserError line."""
    if not isinstance(obj, dict):
        raise _bad(path, line, "line", "must be a JSON object")
    ts = obj.get("timestamp")
    if ts is None:
        raise _bad(path, line, "timestamp", "missing")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise _bad(path, line, "timestamp", f"must be a number of milliseconds ≥ 0, got {ts!r}")
    prompt = obj.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise _bad(path, line, "prompt", "must be a non-empty string")
    inp = _int_field(obj, "input_length", path, line, required=prompt is None)
    if inp is None:
        assert prompt is not None
        inp = max(1, math.ceil(len(prompt) / CHARS_PER_TOKEN))
    out = _int_field(obj, "output_length", path, line, required=True)
    assert out is not None
    raw_ids = obj.get("hash_ids")
    ids: tuple[int, ...] = ()
    if raw_ids is not None:
        if not isinstance(raw_ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in raw_ids):
            raise _bad(path, line, "hash_ids", "must be a list of whole numbers ≥ 0")
        ids = tuple(raw_ids)
    sid = obj.get("session_id")
    klass = obj.get("class")
    return TraceRequest(float(ts), inp, out, ids, prompt, None if sid is None else str(sid),
                        None if klass is None else str(klass), line)


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Every request of a JSONL trace, ordered by timestamp (ties keep the file's order)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{p}: trace file not found") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read the trace: {e}") from None
    rows: list[TraceRequest] = []
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise _bad(str(p), n, "line", f"not JSON: {e}") from None
        rows.append(parse_request(obj, str(p), n))
    if not rows:
        raise UserError(f"{p}: the trace has no requests")
    rows.sort(key=lambda r: r.timestamp_ms)
    return rows


def trace_length_s(rows: list[TraceRequest]) -> float:
    """The trace's length: first to last arrival plus one mean gap (so a loop's seam looks like the rest)."""
    span = (rows[-1].timestamp_ms - rows[0].timestamp_ms) / 1000.0
    if len(rows) < 2 or span <= 0:
        return max(span, 1.0)
    return span + span / (len(rows) - 1)


@dataclass(frozen=True)
class TraceWindow:
    """One replay step: trace time [trace_start_s, trace_end_s), its arrivals in wall seconds."""

    index: int
    trace_start_s: float
    trace_end_s: float
    wall_s: float  # the step's length: (trace_end_s - trace_start_s) / speedup
    offsets: tuple[float, ...]  # wall seconds from the step's start, ascending
    requests: tuple[tuple[Any, ...], ...]  # per arrival: request_payload(...)

    @property
    def offered_rps(self) -> float:
        return len(self.offsets) / self.wall_s if self.wall_s > 0 else 0.0


def request_payload(r: TraceRequest, row: int, turn: int | None = None) -> tuple[Any, ...]:
    """What a load generator needs to send one trace request (msgpack-safe: shipped to workers):
    (row, input_length, output_length, hash_ids, prompt, class, session_id, turn)."""
    return (row, r.input_length, r.output_length, list(r.hash_ids), r.prompt, r.cls, r.session_id, turn)


def session_turns(rows: list[TraceRequest]) -> list[int | None]:
    """Each row's turn in its session (1, 2, … in timestamp order); None without a session_id."""
    seen: dict[str, int] = {}
    out: list[int | None] = []
    for r in rows:
        if r.session_id is None:
            out.append(None)
            continue
        seen[r.session_id] = seen.get(r.session_id, 0) + 1
        out.append(seen[r.session_id])
    return out


def session_shard(requests: list[Any] | tuple[Any, ...], index: int, count: int) -> list[int]:
    """Positions of the arrivals process `index` of `count` sends when sessions are on: a session's
    turns all go to one process (a stable hash of its id), the rest round-robin (k, k+n, …). Every
    position goes to exactly one process."""
    out = []
    for i, req in enumerate(requests):
        sid = req[6] if len(req) > 6 else None
        owner = zlib.crc32(str(sid).encode()) % count if sid is not None else i % count
        if owner == index:
            out.append(i)
    return out


def trace_windows(rows: list[TraceRequest], *, speedup: float = 1.0, start_s: float = 0.0,
                  duration_s: float | None = None, loop: bool = False, window_s: float = 60.0) -> list[TraceWindow]:
    """The replay's steps. Trace time t (seconds after the first request) plays at wall time
    (t - start_s) / speedup after the replay's start; windows are `window_s` trace seconds each
    (the last may be shorter)."""
    if not rows:
        return []
    length = trace_length_s(rows)
    if duration_s is None:
        if loop:
            raise UserError("load.duration_s: a looped trace needs a duration")
        duration_s = max(length - start_s, 0.0)
    elif not loop:
        duration_s = min(duration_s, max(length - start_s, 0.0))
    if duration_s <= 0:
        raise UserError(f"load.start_s: {start_s:g} s is past the trace's end ({length:g} s)")
    t0 = rows[0].timestamp_ms
    base = [(r.timestamp_ms - t0) / 1000.0 for r in rows]
    turns = session_turns(rows)
    end = start_s + duration_s
    # Every arrival in [start_s, end): the trace, repeated every `length` seconds when looping.
    times: list[tuple[float, int]] = []
    rounds = math.ceil(end / length) if loop else 1
    for k in range(rounds):
        shift = k * length
        for i, t in enumerate(base):
            tt = t + shift
            if start_s <= tt < end:
                times.append((tt, i))
    out: list[TraceWindow] = []
    n = max(1, math.ceil(duration_s / window_s - 1e-9))
    j = 0
    for w in range(n):
        ws = start_s + w * window_s
        we = min(ws + window_s, end)
        offs: list[float] = []
        reqs: list[tuple[Any, ...]] = []
        while j < len(times) and times[j][0] < we:
            tt, i = times[j]
            offs.append((tt - ws) / speedup)
            reqs.append(request_payload(rows[i], i, turns[i]))
            j += 1
        out.append(TraceWindow(w, ws, we, (we - ws) / speedup, tuple(offs), tuple(reqs)))
    return out


# -- prompts -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8192)
def block_text(hash_id: int, block_tokens: int) -> str:
    """The text of prefix block `hash_id`: exactly block_tokens × 4 characters, the same everywhere."""
    return synthetic_text(random.Random(f"trace-block-{hash_id}-{block_tokens}"), block_tokens, zh=False)


def synth_prompt(input_length: int, hash_ids: list[int] | tuple[int, ...], row: int,
                 block_tokens: int = DEFAULT_BLOCK_TOKENS) -> str:
    """A prompt of `input_length` estimated tokens whose blocks follow `hash_ids` (see the module doc)."""
    want = input_length * CHARS_PER_TOKEN
    parts: list[str] = []
    have = 0
    for h in hash_ids:
        if have >= want:
            break
        parts.append(block_text(int(h), block_tokens))
        have += block_tokens * CHARS_PER_TOKEN
    text = "".join(parts)[:want]
    if len(text) < want:
        rest = (want - len(text)) // CHARS_PER_TOKEN
        text += synthetic_text(random.Random(f"trace-row-{row}"), rest, zh=False)
    return text


@dataclass(frozen=True)
class TraceSample(Sample):
    """A trace request's prompt; its `class` goes into the record's `class` field."""

    workload_class: str = "default"
    session_id: str | None = None
    turn: int | None = None


def trace_sample(payload: tuple[Any, ...] | list[Any], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 history: list[dict[str, Any]] | None = None) -> TraceSample:
    """The Sample a trace arrival sends (payload: `request_payload`). With `history` (a session's
    earlier messages, answers included) the request is a conversation: the history, then this
    turn's text as the next user message."""
    row, inp, out, ids, prompt = payload[:5]
    klass = payload[5] if len(payload) > 5 and payload[5] else "default"
    sid = payload[6] if len(payload) > 6 else None
    turn = payload[7] if len(payload) > 7 else None
    text = prompt if prompt is not None else synth_prompt(int(inp), ids, int(row), block_tokens)
    if history is not None:
        base = Sample.make(f"trace-{row}", messages=[*history, {"role": "user", "content": text}], max_tokens=int(out))
    else:
        base = Sample.make(f"trace-{row}", prompt=text, max_tokens=int(out))
    return TraceSample(base.id, base.prompt, base.messages, base.max_tokens, base.prompt_chars, base.prompt_tokens_est,
                       workload_class=str(klass), session_id=None if sid is None else str(sid),
                       turn=None if turn is None else int(turn))
