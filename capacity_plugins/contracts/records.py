"""RequestRecord: one request attempt, exactly the fields of requests.jsonl.

Raw time stamps live in `Timings` (perf_counter_ns, plus one time.time() at send for wall
alignment); `RequestRecord.build()` derives the metrics with their units, so there is one
definition of TTFT / ITL / TPOT / E2E for every dialect:

- TTFT = first_token − sent (first event carrying generated output on any channel)
- first_visible = first non-empty *content* − sent
- ITL = gaps between consecutive output events (chunk gaps; a k-token chunk is one gap)
- TPOT = (last_token − first_token) / (output_tokens − 1), null when output_tokens ≤ 1
- TPOT visible = (last visible − first visible) / (visible_output_tokens − 1): a reasoning
  answer's pace once it shows (only when the answer had a reasoning channel)
- E2E = end − sent (end = body fully read or the failure seen)

requests.jsonl schema (one JSON object per request *attempt*, appended as it ends):

| field | meaning |
|---|---|
| request_id | client-made unique id of this attempt (hex) |
| response_id | the server's `id` (or its `x-request-id` header); null when neither exists |
| prompt_id | corpus sample id |
| worker | index of the load-generating process (0 in a local run) |
| step, warmup | load step index (null outside a shape) and whether it was sent in the step's warm-up |
| attempt | 1 for the first try; retries (--retries) are further lines with 2, 3, … |
| ok, status | no error; HTTP status (0 when no response) |
| error_kind | http_4xx, http_429, http_5xx, connect, timeout, stream_cut, malformed, server_error, protocol, cancelled, or null (docs/metrics.md) |
| error | short message (server text truncated to 300 chars; never headers or keys) |
| scheduled_unix | open loop: when the request was due; null in closed loop |
| sent_unix | wall clock at send |
| ttft_ms | first chunk carrying output on any channel (content, reasoning, tool call) − sent; null without streaming |
| first_visible_ms | first non-empty content − sent |
| e2e_ms | last byte (or failure) − sent |
| ttft_from_schedule_ms, e2e_from_schedule_ms | the same from scheduled_unix (what users feel in open loop) |
| tpot_ms | (last token − first token) / (output_tokens − 1); null when output_tokens ≤ 1 |
| itl_ms | gaps between consecutive output chunks (chunks that arrived in one read share a stamp: gap 0) |
| itl_tokens | tokens in each later chunk when the server says (continuous usage), else null |
| prompt_tokens | server count when given |
| output_tokens, output_tokens_source | count and where it came from: usage > continuous_usage > (tokenizer or chunks, by evidence: docs/metrics.md) |
| client_output_tokens | the client's chunk count when it differs from output_tokens |
| tokenizer_output_tokens | the local tokenizer's count of the generated text (with --tokenizer, no server count), whichever count was chosen |
| finish_reason | why the generation ended, as the server said (`length` = max_tokens reached, `stop`, `eos_token`, …); null when it did not say |
| max_tokens | limit asked for (per-sample from the corpus, else --max-tokens) |
| stream | streaming request |
| workload | the scenario's workload class this request was drawn for (`workloads:`), or a trace replay's `class` from the trace line; null otherwise. Folders written before it carry `class: "default"` instead, read as null |
| session_id, turn | a multi-turn trace replay (`load.sessions`): the conversation and the turn in it (1 = first); an agentic session (`load.kind: agentic`): the session's run and its model call (1 = first); null otherwise |
| tool_wait_ms | an agentic session's model call after tool results: the tool latency the client waited since the previous call's answer (measured); null otherwise |
| session_ms | an agentic session's last model call, when every call of the session succeeded: the session's completion time, its first call's send → this call's last byte; null otherwise |
| reasoning_tokens, reasoning_tokens_source | output tokens the model spent thinking: the server's `usage.completion_tokens_details.reasoning_tokens` (`usage`), else the reasoning-channel chunks counted (`channel`: `reasoning_content` / `reasoning` / `thinking`, one token per chunk); null when the answer had no reasoning channel and the server said nothing |
| visible_output_tokens | output_tokens − reasoning_tokens (with a server count), else the visible chunks counted; null with reasoning_tokens |
| tpot_visible_ms | TPOT over the visible tokens only; null with reasoning_tokens or when visible_output_tokens ≤ 1 |
| images | images sent with the prompt (a corpus line's `images`, or `request.images` synthetic ones); null for a text-only request |
| image_sizes | each image's resolution, `WxH`, in the order sent; null for one the client did not measure (a URL the server fetches) |

Differences from peers (docs/metrics.md): vLLM bench stamps TTFT at the first SSE message with
`choices`, even a role-only one, and so reports a smaller TTFT; we skip role-only and empty
chunks. Our ITL is per chunk like vLLM's; genai-perf/aiperf's "ITL" is our TPOT.

The analysis reads a subset of these columns (`ANALYSIS_COLUMNS`) with the kinds listed there;
writers and readers both import this module, so a field is named in one place only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import sub
from typing import Any, cast

import orjson

from capacity_plugins.contracts.images import ImagePart

ERROR_KINDS = (
    "http_4xx",
    "http_429",
    "http_5xx",
    "connect",
    "timeout",
    "stream_cut",
    "malformed",
    "server_error",
    "protocol",
    "cancelled",
)
TOKEN_SOURCES = ("usage", "continuous_usage", "tokenizer", "chunks")
REASONING_SOURCES = ("usage", "channel")


@dataclass(slots=True)
class Timings:
    """Raw stamps of one attempt. ns values are perf_counter_ns(); None = event never happened."""

    sent_unix: float
    sent_ns: int
    scheduled_unix: float | None = None
    first_token_ns: int | None = None
    first_visible_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)  # every output event
    chunk_tokens: list[int | None] = field(default_factory=list)  # tokens per output event, if said
    end_ns: int | None = None
    # Stream reads that brought output, and those that brought more than one output event (the
    # client was late: a validity signal, not a record field).
    reads: int = 0
    backlog_reads: int = 0
    # Output events by channel (dialects' REASONING / VISIBLE) and the last visible one's stamp:
    # reasoning and visible tokens counted by channel when the server says no count, TPOT over
    # the visible tokens.
    reasoning_events: int = 0
    visible_events: int = 0
    last_visible_ns: int | None = None


def _ms(ns: int) -> float:
    return round(ns / 1e6, 4)


def _gaps_ms(stamps: list[int]) -> list[float]:
    """`[_ms(b - a) for a, b in pairs]`, bit for bit, at a third of the cost (it ran once per
    output chunk: 80 µs of a 256-token request's ~1.4 ms on the client's core). A gap of d ns
    that is not a tie (d % 100 != 50) and not negative rounds to (d + 50) // 100 tenths of a µs,
    and that integer / 1e4 is the double nearest it — what round() returns. Ties and negative
    gaps, whose rounding depends on the double d / 1e6, keep round()."""
    return [(d + 50) // 100 / 1e4 if d >= 0 and d % 100 != 50 else round(d / 1e6, 4)
            for d in map(sub, stamps[1:], stamps)]


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    response_id: str | None
    prompt_id: str | None
    worker: int
    step: int | None
    warmup: bool
    attempt: int
    ok: bool
    status: int
    error_kind: str | None
    error: str | None
    scheduled_unix: float | None
    sent_unix: float
    ttft_ms: float | None
    first_visible_ms: float | None
    e2e_ms: float | None
    ttft_from_schedule_ms: float | None
    e2e_from_schedule_ms: float | None
    tpot_ms: float | None
    itl_ms: list[float]
    itl_tokens: list[int] | None
    prompt_tokens: int | None
    output_tokens: int | None
    output_tokens_source: str | None
    client_output_tokens: int | None
    max_tokens: int | None
    stream: bool
    # The scenario's workload class (`workloads:`); None when the scenario defines none.
    workload: str | None = None
    tokenizer_output_tokens: int | None = None
    finish_reason: str | None = None
    # A multi-turn trace replay (load.sessions): the conversation and the turn (1 = its first).
    session_id: str | None = None
    turn: int | None = None
    # An agentic session (load.kind agentic): the tool latency waited before this call, and on the
    # session's last call its completion time (first send → last byte).
    tool_wait_ms: float | None = None
    session_ms: float | None = None
    # A reasoning answer (module doc): thinking and visible tokens, TPOT over the visible ones.
    reasoning_tokens: int | None = None
    reasoning_tokens_source: str | None = None
    visible_output_tokens: int | None = None
    tpot_visible_ms: float | None = None
    # Image inputs (contracts/images.py): how many, and each one's WxH (null: not known to the client).
    images: int | None = None
    image_sizes: list[str | None] | None = None

    @classmethod
    def build(
        cls,
        t: Timings,
        *,
        request_id: str,
        response_id: str | None,
        prompt_id: str | None,
        worker: int,
        step: int | None,
        warmup: bool,
        attempt: int,
        status: int,
        error_kind: str | None,
        error: str | None,
        usage_output_tokens: int | None,
        continuous_output_tokens: int | None,
        prompt_tokens: int | None,
        max_tokens: int | None,
        stream: bool,
        workload: str | None = None,
        tokenizer_output_tokens: int | None = None,
        prefer_chunks: bool = False,
        finish_reason: str | None = None,
        session_id: str | None = None,
        turn: int | None = None,
        usage_reasoning_tokens: int | None = None,
        tool_wait_ms: float | None = None,
        session_start_unix: float | None = None,
        images: tuple[ImagePart, ...] = (),
    ) -> RequestRecord:
        sent = t.sent_ns
        end = t.end_ns if t.end_ns is not None else sent
        ttft = _ms(t.first_token_ns - sent) if t.first_token_ns is not None else None
        visible = _ms(t.first_visible_ns - sent) if t.first_visible_ns is not None else None
        e2e = _ms(end - sent)
        stamps = t.token_ns
        itl = _gaps_ms(stamps)
        said = t.chunk_tokens[1:]
        # only when the server said it for every chunk (`in`: one C pass, not a Python loop)
        said_all = cast("list[int]", said) if said and None not in said else None

        chunks = len(stamps) if stream else None
        if usage_output_tokens is not None:
            output, source = usage_output_tokens, "usage"
        elif continuous_output_tokens is not None:
            output, source = continuous_output_tokens, "continuous_usage"
        elif tokenizer_output_tokens is not None and not (prefer_chunks and chunks is not None):
            output, source = tokenizer_output_tokens, "tokenizer"
        elif chunks is not None:
            output, source = chunks, "chunks"
        else:
            output, source = None, None
        client = chunks if chunks is not None and chunks != output else None

        tpot = None
        if output is not None and output > 1 and t.first_token_ns is not None and len(stamps) > 1:
            tpot = round((stamps[-1] - t.first_token_ns) / 1e6 / (output - 1), 4)

        reasoning = _reasoning(t, usage_reasoning_tokens, output, source)
        # the session's completion time, on its last call (session_start_unix given only then)
        session = (round((t.sent_unix - session_start_unix) * 1000.0 + e2e, 4)
                   if session_start_unix is not None and error_kind is None else None)

        ttft_sched = e2e_sched = None
        if t.scheduled_unix is not None:
            lag_ms = (t.sent_unix - t.scheduled_unix) * 1000.0
            ttft_sched = round(ttft + lag_ms, 4) if ttft is not None else None
            e2e_sched = round(e2e + lag_ms, 4)
        return cls(
            request_id=request_id,
            response_id=response_id,
            prompt_id=prompt_id,
            worker=worker,
            step=step,
            warmup=warmup,
            attempt=attempt,
            ok=error_kind is None,
            status=status,
            error_kind=error_kind,
            error=error,
            scheduled_unix=t.scheduled_unix,
            sent_unix=t.sent_unix,
            ttft_ms=ttft,
            first_visible_ms=visible,
            e2e_ms=e2e,
            ttft_from_schedule_ms=ttft_sched,
            e2e_from_schedule_ms=e2e_sched,
            tpot_ms=tpot,
            itl_ms=itl,
            itl_tokens=said_all,
            prompt_tokens=prompt_tokens,
            output_tokens=output,
            output_tokens_source=source,
            client_output_tokens=client,
            max_tokens=max_tokens,
            stream=stream,
            workload=workload,
            tokenizer_output_tokens=tokenizer_output_tokens,
            finish_reason=finish_reason,
            session_id=session_id,
            turn=turn,
            tool_wait_ms=None if tool_wait_ms is None else round(tool_wait_ms, 4),
            session_ms=session,
            **reasoning,
            images=len(images) if images else None,
            image_sizes=[im.size for im in images] if images else None,
        )

    def to_dict(self) -> dict[str, Any]:
        # shallow on purpose: dataclasses.asdict deep-copies itl_ms, which cost ~15 % of the
        # whole client hot path in bench_client.py
        return {name: getattr(self, name) for name in _ATTRS}

    def to_json_bytes(self) -> bytes:
        """One requests.jsonl line (newline included)."""
        # orjson writes a dataclass's fields in order, as to_dict() names them, without the dict
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        # Older folders carry `class: "default"` (a placeholder that never held a class): ignored.
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _reasoning(t: Timings, usage_reasoning: int | None, output: int | None,
               output_source: str | None) -> dict[str, Any]:
    """The reasoning fields of a record: empty (all null) for an answer without thinking.

    The server's count wins; else the reasoning chunks counted (one token each, as the `chunks`
    source counts). Visible = output − reasoning when the output is a server's count, else the
    visible chunks: both counts then come from the same stream.
    """
    if usage_reasoning is not None:
        reasoning, source = usage_reasoning, "usage"
    elif t.reasoning_events:
        reasoning, source = t.reasoning_events, "channel"
    else:
        return {}
    if output is not None and output_source in ("usage", "continuous_usage"):
        visible: int | None = max(0, output - reasoning)
    else:
        visible = t.visible_events if t.token_ns else (max(0, output - reasoning) if output is not None else None)
    tpot = None
    if visible is not None and visible > 1 and t.first_visible_ns is not None and t.last_visible_ns is not None:
        tpot = round((t.last_visible_ns - t.first_visible_ns) / 1e6 / (visible - 1), 4)
    return {"reasoning_tokens": reasoning, "reasoning_tokens_source": source,
            "visible_output_tokens": visible, "tpot_visible_ms": tpot}


_ATTRS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
RECORD_FIELDS: tuple[str, ...] = _ATTRS

# The columns `capacity analyze` loads, with the JSON kind each must have:
# "f" number, "b" true/false, "s" string, "i" integer (step index). Every name is a record field.
ANALYSIS_COLUMNS: dict[str, str] = {
    "request_id": "s",
    "step": "i",
    "warmup": "b",
    "ok": "b",
    "error_kind": "s",
    "sent_unix": "f",
    "scheduled_unix": "f",
    "ttft_ms": "f",
    "e2e_ms": "f",
    "tpot_ms": "f",
    "ttft_from_schedule_ms": "f",
    "e2e_from_schedule_ms": "f",
    "output_tokens": "f",
    "prompt_tokens": "f",
    "workload": "s",
    "turn": "i",
    # an agentic session's (analysis/agentic.py): which session, the tool wait, its completion time
    "session_id": "s",
    "tool_wait_ms": "f",
    "session_ms": "f",
    # a reasoning answer's (analysis/reasoning.py): time to first output token, thinking, pace
    "first_visible_ms": "f",
    "reasoning_tokens": "f",
    "reasoning_tokens_source": "s",
    "visible_output_tokens": "f",
    "tpot_visible_ms": "f",
    # image inputs (analysis/images.py): latency by how many images a request carried
    "images": "f",
}
assert set(ANALYSIS_COLUMNS) <= set(RECORD_FIELDS), "ANALYSIS_COLUMNS names a field records do not have"


# requests.arrow: each batch's custom metadata, the byte range its records take in requests.jsonl
# (the file's size before and after their lines were written)
JSONL_FROM = b"jsonl_from"
JSONL_BYTES = b"jsonl_bytes"


def columnar_schema(itl: Any = None) -> Any:
    """requests.arrow's Arrow schema: ANALYSIS_COLUMNS by kind, then `itl_ms` as lists of float32
    (or of `itl`: the analysis parses the JSONL's gaps as float64 with the same schema otherwise).
    Needs pyarrow; imported here, not at module import, so the load side never pays for it."""
    import pyarrow as pa

    types = {"f": pa.float64(), "b": pa.bool_(), "s": pa.string(), "i": pa.int64()}
    return pa.schema([(c, types[k]) for c, k in ANALYSIS_COLUMNS.items()]
                     + [("itl_ms", pa.list_(pa.float32() if itl is None else itl))])
