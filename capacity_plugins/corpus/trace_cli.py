"""`capacity trace`: make a replayable trace (corpus/trace.py) from what you already have.

- ``from-records RESULTS_DIR``: a run's requests.jsonl → a trace of the same arrivals (scheduled
  time when the run was open loop, else the send time), the server's prompt token count and the
  output length each request got. Requests that sent the same prompt (the same ``prompt_id``)
  get the same ``hash_ids``, so replaying keeps that repetition. Retries are left out: a trace is
  what the clients asked for, not how often they had to ask.
- ``from-log LOG.jsonl``: an OpenAI-style JSONL access log (one request a line: a time, the
  request body, the response's ``usage``) → a trace. The prompt text is not copied: it is cut into
  blocks of ``--block-tokens`` (4 characters a token), each block hashed together with everything
  before it (as Mooncake does), and the hashes numbered — equal prefixes get equal ``hash_ids``,
  and no text of your users leaves the log. ``--keep-prompts`` copies the text instead.

- ``from-records`` also writes the agentic sessions a run completed (load.kind agentic) as
  session scripts (corpus/agentic.py), ``sessions.jsonl`` beside the trace: each session's calls,
  output lengths, tool waits and tool results' sizes, replayable as ``load.path``.
- ``from-aiperf TRACE.jsonl``: AIPerf's multi-turn Mooncake trace (``session_id``, ``input_length``,
  ``output_length``, ``delay``) → session scripts for ``load.kind: agentic`` (docs/traffic.md).

Accepted log fields (the first present wins): time — ``timestamp``, ``time``, ``created``,
``start_time`` (Unix seconds or milliseconds, or ISO 8601); the body — ``request`` or ``body``
(``messages`` or ``prompt``, ``max_tokens`` / ``max_completion_tokens``); the counts —
``response.usage`` or ``usage`` (``prompt_tokens``, ``completion_tokens``). A line without a time
or without a prompt length (neither usage nor text) is an error naming its line; ``--skip-bad``
leaves such lines out and says how many.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.corpus.text import messages_text
from capacity_plugins.corpus.trace import CHARS_PER_TOKEN, DEFAULT_BLOCK_TOKENS
from capacity_plugins.errors import CommandParser, UserError


def _parser() -> CommandParser:
    p = CommandParser(prog="capacity trace", description="make a replayable trace (load.kind: trace)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("from-records", help="a run's requests.jsonl → a trace of the same traffic")
    r.add_argument("results_dir", type=Path, help="a results folder (with requests.jsonl)")
    r.add_argument("-o", "--output", type=Path, default=None, help="trace file (default: RESULTS_DIR/trace.jsonl)")
    r.add_argument("--block-tokens", type=int, default=DEFAULT_BLOCK_TOKENS, metavar="N",
                   help="tokens per hash_ids block (the replaying scenario's load.block_tokens)")
    g = sub.add_parser("from-log", help="an OpenAI-style JSONL access log → a trace")
    g.add_argument("log", type=Path, help="JSONL access log, one request a line")
    g.add_argument("-o", "--output", type=Path, default=None, help="trace file (default: LOG with .trace.jsonl)")
    g.add_argument("--block-tokens", type=int, default=DEFAULT_BLOCK_TOKENS, metavar="N",
                   help="tokens per hash_ids block (the replaying scenario's load.block_tokens)")
    g.add_argument("--keep-prompts", action="store_true", help="copy the prompt text into the trace (else hash_ids only)")
    g.add_argument("--skip-bad", action="store_true", help="leave out lines that cannot be read (and count them)")
    a = sub.add_parser("from-aiperf", help="AIPerf's multi-turn Mooncake trace → agentic session scripts")
    a.add_argument("trace", type=Path, help="JSONL: session_id, input_length, output_length, delay (ms)")
    a.add_argument("-o", "--output", type=Path, default=None, help="session scripts (default: TRACE with .sessions.jsonl)")
    return p


def _write(rows: list[dict[str, Any]], out: Path) -> None:
    if not rows:
        raise UserError("no request to write: the trace would be empty")
    t0 = min(r["timestamp"] for r in rows)
    rows.sort(key=lambda r: r["timestamp"])
    with out.open("w", encoding="utf-8") as f:
        for r in rows:
            r["timestamp"] = round(r["timestamp"] - t0, 3)
            f.write(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n")


# -- from-records -----------------------------------------------------------------------------------------


def from_records(results_dir: Path, out: Path | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> tuple[Path, int, int]:
    """Write the trace; returns (path, requests written, records left out)."""
    src = Path(results_dir) / "requests.jsonl"
    if not src.is_file():
        raise UserError(f"{results_dir}: no requests.jsonl (is it a results folder?)")
    ids: dict[tuple[str, int], int] = {}
    rows: list[dict[str, Any]] = []
    skipped = 0
    for n, raw in enumerate(src.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UserError(f"{src}:{n}: line: not JSON") from None
        if (rec.get("attempt") or 1) > 1 or rec.get("error_kind") == "cancelled":
            continue  # a retry repeats a request; a cancelled one was cut by the test's stop
        at = rec.get("scheduled_unix") or rec.get("sent_unix")
        inp = rec.get("prompt_tokens")
        out_tokens = rec.get("output_tokens") if rec.get("ok") else None
        out_len = out_tokens or rec.get("max_tokens")
        if at is None or not inp or not out_len:
            skipped += 1  # no server prompt count, or nothing says how long the answer was
            continue
        pid = rec.get("prompt_id")
        hash_ids = None
        if pid:
            blocks = math.ceil(int(inp) / block_tokens)
            hash_ids = [ids.setdefault((str(pid), k), len(ids)) for k in range(blocks)]
        klass = rec.get("workload") or rec.get("class")  # folders before `workload` carried `class`
        rows.append({"timestamp": float(at) * 1000.0, "input_length": int(inp), "output_length": int(out_len),
                     "hash_ids": hash_ids, "class": None if klass in (None, "default") else klass})
    dest = out or Path(results_dir) / "trace.jsonl"
    _write(rows, dest)
    return dest, len(rows), skipped


# -- from-log ---------------------------------------------------------------------------------------------


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def _time_ms(v: Any, where: str) -> float:
    if isinstance(v, bool):
        raise UserError(f"{where}: timestamp: not a time: {v!r}")
    if isinstance(v, int | float):
        return float(v) if v > 1e11 else float(v) * 1000.0  # milliseconds, else seconds
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1000.0
        except ValueError:
            pass
    raise UserError(f"{where}: timestamp: not a Unix time or ISO 8601: {v!r}")


def _prompt_text(body: dict[str, Any]) -> str | None:
    if isinstance(body.get("messages"), list):
        return messages_text(body["messages"])
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else None


def _block_hashes(text: str, block_tokens: int, ids: dict[bytes, int]) -> list[int]:
    size = block_tokens * CHARS_PER_TOKEN
    out: list[int] = []
    h = b""
    for start in range(0, len(text), size):
        h = hashlib.blake2b(h + text[start:start + size].encode("utf-8"), digest_size=16).digest()
        out.append(ids.setdefault(h, len(ids)))
    return out


def log_request(obj: Any, where: str, block_tokens: int, ids: dict[bytes, int], keep_prompts: bool) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: line: must be a JSON object")
    t = _first(obj, "timestamp", "time", "created", "start_time")
    if t is None:
        raise UserError(f"{where}: timestamp: missing (timestamp, time, created or start_time)")
    body = _first(obj, "request", "body") or {}
    if not isinstance(body, dict):
        raise UserError(f"{where}: request: must be a JSON object")
    resp: dict[str, Any] = obj["response"] if isinstance(obj.get("response"), dict) else {}
    usage = _first(resp, "usage") or _first(obj, "usage") or {}
    text = _prompt_text(body)
    inp = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not inp:
        if not text:
            raise UserError(f"{where}: usage.prompt_tokens: missing (and no prompt text to count)")
        inp = math.ceil(len(text) / CHARS_PER_TOKEN)
    out = usage.get("completion_tokens") if isinstance(usage, dict) else None
    out = out or _first(body, "max_tokens", "max_completion_tokens")
    if not out:
        raise UserError(f"{where}: usage.completion_tokens: missing (and no max_tokens in the request)")
    row: dict[str, Any] = {"timestamp": _time_ms(t, where), "input_length": int(inp), "output_length": int(out)}
    if text and keep_prompts:
        row["prompt"] = text
    elif text:
        row["hash_ids"] = _block_hashes(text, block_tokens, ids)
    for key in ("session_id", "user"):
        if obj.get(key) is not None:
            row["session_id"] = str(obj[key])
            break
    return row


def from_log(log: Path, out: Path | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS, keep_prompts: bool = False,
             skip_bad: bool = False) -> tuple[Path, int, int]:
    try:
        data = Path(log).read_bytes()
    except OSError as e:
        raise UserError(f"{log}: cannot read the log: {e}") from None
    ids: dict[bytes, int] = {}
    rows: list[dict[str, Any]] = []
    skipped = 0
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise UserError(f"{log}:{n}: line: not JSON") from None
            rows.append(log_request(obj, f"{log}:{n}", block_tokens, ids, keep_prompts))
        except UserError:
            if not skip_bad:
                raise
            skipped += 1
    dest = out or Path(log).with_suffix(".trace.jsonl")
    _write(rows, dest)
    return dest, len(rows), skipped


def records_sessions(results_dir: Path, out: Path | None = None) -> tuple[Path, int] | None:
    """The agentic sessions a run completed as session scripts (None when it had none)."""
    from capacity_plugins.corpus.agentic import sessions_from_records, write_sessions

    src = Path(results_dir) / "requests.jsonl"
    records = []
    for raw in src.read_bytes().splitlines():
        if raw.strip():
            try:
                records.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue  # from_records has already named a bad line
    scripts = sessions_from_records(records)
    if not scripts:
        return None
    dest = out or Path(results_dir) / "sessions.jsonl"
    write_sessions(scripts, dest)
    return dest, len(scripts)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "from-aiperf":
        from capacity_plugins.corpus.agentic import sessions_from_aiperf, write_sessions

        scripts = sessions_from_aiperf(args.trace)
        dest = args.output or Path(args.trace).with_suffix(".sessions.jsonl")
        write_sessions(scripts, dest)
        print(f"{dest}: {len(scripts)} sessions (load.kind: agentic, load.path)")
        return 0
    if args.block_tokens < 1:
        raise UserError("--block-tokens must be ≥ 1")
    if args.cmd == "from-records":
        dest, n, skipped = from_records(args.results_dir, args.output, args.block_tokens)
        why = " (no server prompt count or output length)"
        found = records_sessions(args.results_dir)
        if found is not None:
            print(f"{found[0]}: {found[1]} agentic sessions (load.kind: agentic, load.path)")
    else:
        dest, n, skipped = from_log(args.log, args.output, args.block_tokens, args.keep_prompts, args.skip_bad)
        why = " (unreadable lines)"
    print(f"{dest}: {n} requests" + (f"; {skipped} left out{why}" if skipped else ""))
    if skipped:
        print(f"capacity trace: {skipped} left out{why}", file=sys.stderr)
    return 0
