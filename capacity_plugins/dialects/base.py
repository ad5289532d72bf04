"""What every dialect provides: build one HTTP call from a sample, parse what comes back, and
say where the server lists its models (`models_path`, `parse_models`).

No Locust import here: the user (users.py) does the I/O and stamps the time of each line with
`perf_counter_ns()` *before* handing the payload to a parser, so parsing cost never shifts a
timestamp. Parsers return a small int per event so the hot path allocates nothing it doesn't need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from capacity_plugins.contracts.images import ImagePart

# What one event carried (return value of Parser.event).
NO_OUTPUT = 0  # role-only / usage-only / keep-alive / final summary without tokens
OUTPUT = 1  # generated output on a non-visible channel (reasoning, tool call, special token)
VISIBLE = 2  # generated, non-empty visible content (implies OUTPUT)
# generated output on the reasoning channel only (`reasoning_content` / `reasoning` / `thinking`):
# implies OUTPUT, never VISIBLE; the record counts these events when the server says no count
REASONING = 3


class MalformedEvent(ValueError):
    """A payload that is not the JSON the dialect expects (error_kind `malformed`)."""


@dataclass(frozen=True, slots=True)
class RequestParams:
    model: str = ""
    max_tokens: int | None = None  # None or 0: no limit sent (the server's default)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = True
    include_usage: bool = True
    ignore_eos: bool = False
    batch_size: int = 1  # items per request of an embeddings / rerank dialect (dialects/embeddings.py)
    images: int = 0  # synthetic images per chat request (corpus/images.py), unless the prompt names its own
    image_size: str = "1024x1024"


@dataclass(frozen=True, slots=True)
class HttpCall:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    max_tokens: int | None  # the limit actually asked for (per-sample or global)


class SampleLike(Protocol):
    """The corpus Sample fields a dialect reads (capacity_plugins.corpus.Sample)."""

    id: str
    max_tokens: int | None
    images: tuple[ImagePart, ...]  # sent with the last user turn (openai-chat, ollama)

    @property
    def text(self) -> str: ...

    def as_messages(self) -> list[dict[str, Any]]: ...


class Parser:
    """Per-request parse state. Subclasses fill the counters as events arrive.

    `framing` says how the body is split into events ("sse" or "ndjson"). Whatever the payload,
    `event` / `full` return a kind or raise MalformedEvent, never another exception (the user
    would misfile the request); counters stay None or non-negative ints, `response_id` None or a
    string, `error` None or a non-empty string. tests/test_parser_properties.py checks all of it.
    """

    framing = "sse"
    __slots__ = (
        "response_id",
        "usage_output_tokens",
        "continuous_output_tokens",
        "prompt_tokens",
        "chunk_tokens",
        "error",
        "done",
        "finish_reason",
        "texts",
        "usage_reasoning_tokens",
        "calls",
    )

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.usage_output_tokens: int | None = None  # final server count (usage / details / eval_count)
        self.continuous_output_tokens: int | None = None  # running count from per-chunk usage
        self.prompt_tokens: int | None = None
        self.chunk_tokens: int | None = None  # tokens in the last event, when the server says
        self.error: str | None = None  # an error object the server sent inside a 200 response
        self.done = False  # the server said the generation finished ([DONE], done:true, details)
        # Why it finished, as the server says ("length": max_tokens reached; "stop" / "eos_token")
        self.finish_reason: str | None = None
        # Generated text pieces (content, reasoning, tool-call arguments), kept only after
        # keep_text() (a --tokenizer run): without it the hot path appends nothing.
        self.texts: list[str] | None = None
        # The server's count of reasoning tokens among the output (OpenAI's
        # usage.completion_tokens_details.reasoning_tokens), when it says.
        self.usage_reasoning_tokens: int | None = None
        # The answer's tool calls as [id, name, arguments] by their index, kept with the text
        # (an agentic session sends them back in its history; dialects that stream OpenAI's
        # `tool_calls` fill it): None unless keep_text() was called.
        self.calls: list[list[str]] | None = None

    def keep_text(self) -> None:
        """Keep the generated text (and tool calls) from now on: for a local tokenizer to count
        after the request, or for a session's history."""
        self.texts = []
        self.calls = []

    def generated_text(self) -> str | None:
        """Everything generated (all channels) concatenated; None unless keep_text() was called."""
        return "".join(self.texts) if self.texts is not None else None

    def event(self, data: bytes) -> int:
        """One streamed payload → NO_OUTPUT / OUTPUT / VISIBLE / REASONING. Raises MalformedEvent."""
        raise NotImplementedError

    def full(self, body: bytes) -> int:
        """A whole non-streamed body → what it carried. Raises MalformedEvent."""
        raise NotImplementedError

    def envelope(self, payload: bytes, what: int) -> tuple[bytes, bytes] | None:
        """The repeating shape of a stream payload this parser has just parsed (`event(payload)`
        returned `what`), for the reader's fast path (dialects/fastpath.py).

        (prefix, suffix) such that, for *every* slot s that is a non-empty JSON string body —
        valid UTF-8, no control character, `"` and `\\` only inside the escapes \\" \\\\ \\/ \\b
        \\f \\n \\r \\t — `event(prefix + s + suffix)` would return `what`, set chunk_tokens to
        None, append the decoded s to `texts` (when kept) and change nothing else. None (the
        default): no such shape is known, every payload is parsed in full.
        """
        return None


class Dialect(Protocol):
    """One API. Optional: `ready_path`, a GET the preflight checks first (200 = ready to serve),
    for APIs with a readiness route (Triton's `/v2/health/ready`)."""

    name: str

    @property
    def models_path(self) -> str | None:
        """Where the server lists the models it serves (GET); None when this API has no listing.
        A `{model}` in it is the model's name (URL-quoted): an API that only answers for one
        named model (Triton), so the model must be given."""
        ...

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall: ...

    def parser(self, stream: bool) -> Parser: ...

    def parse_models(self, body: bytes) -> list[str] | None:
        """The model names in the answer at `models_path`; None when the body is not such a
        listing (not JSON, an error page, another API's answer). Never raises."""
        ...


def with_images(sample: SampleLike, attach: Callable[[dict[str, Any], tuple[ImagePart, ...]], dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """The sample's messages with its images attached to the last user turn (the last message when
    none is the user's) by `attach`, which returns that message anew: the corpus's own messages
    are shared by every request and never changed."""
    messages = sample.as_messages()
    images = getattr(sample, "images", ())
    if not images:
        return messages
    at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), len(messages) - 1)
    out = list(messages)
    out[at] = attach(messages[at], images)
    return out


def reason(value: Any) -> str | None:
    """A finish reason as the record keeps it: a short string, or None."""
    return value[:32] if isinstance(value, str) and value else None


def effective_max_tokens(sample: SampleLike, params: RequestParams) -> int | None:
    """A per-sample limit (the corpus carries it) wins over the global one."""
    per_sample = getattr(sample, "max_tokens", None)
    # 0 = no limit sent, the server's default (`max_tokens: 0`, `--max-tokens 0`: contracts/options.py)
    return per_sample if per_sample is not None else (params.max_tokens or None)


# Counts the analysis stores as int64; anything else a server sends in a count field is no count.
_MAX_COUNT = 2**63


def count(value: Any) -> int | None:
    """A token count from a server's JSON: a non-negative integer, else None (not a count).

    Servers and proxies have been seen sending strings, floats and nulls here; a wrong type must
    not become a record's token count, so it reads as "not said" and other sources count.
    """
    if type(value) is int and 0 <= value < _MAX_COUNT:  # type(), not isinstance: true is not 1 token
        return value
    return None


def is_error_payload(doc: dict[str, Any]) -> bool:
    """An `"error"` member that is not null: `{"error": {...}}` (OpenAI, vLLM), `{"error": "..."}`
    (TGI, Ollama). `"error": null` is the absence of an error, as JSON APIs use it."""
    return doc.get("error") is not None


def error_text(obj: Any) -> str:
    """A short, never empty message from the many shapes of in-stream error objects."""
    node = obj
    for _ in range(4):  # {"error": {"message": ...}} a few levels down; never unbounded
        if isinstance(node, str) and node.strip():
            return node[:300]
        if not isinstance(node, dict):
            break
        node = next((node[k] for k in ("message", "error", "detail") if isinstance(node.get(k), (str, dict))), None)
    text = compact_json(obj)
    return text[:300] if text not in ("", '""', "{}", "[]", "null") else "error payload without a message"


def compact_json(obj: Any) -> str:
    """`obj` (parsed JSON) as compact JSON; "" when it is nested deeper than orjson writes (255).
    str() is no fallback: the repr of a 1000-deep list raises RecursionError."""
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError:
        return ""


def keep_message_text(texts: list[str], msg: Any, content_key: str = "content") -> None:
    """Append a message's / delta's generated text: reasoning, content, tool-call arguments.

    `reasoning_content` and `reasoning` are one channel under two names (some servers send both
    with the same text), so only the first present counts. Tool-call arguments that arrive as an
    object (Ollama) are counted as their compact JSON.
    """
    if not isinstance(msg, dict):
        return
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or msg.get("thinking")
    if isinstance(reasoning, str):
        texts.append(reasoning)
    content = msg.get(content_key)
    if isinstance(content, str) and content:
        texts.append(content)
    calls = msg.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(args, str):
                texts.append(args)
            elif args is not None:
                # An object is counted as its compact JSON (nothing for one too deep to write).
                texts.append(compact_json(args))


def keep_tool_calls(calls: list[list[str]], deltas: Any) -> None:
    """Merge OpenAI `tool_calls` (streamed deltas, or a whole message's list) into `calls`
    ([id, name, arguments] by `index`): the first piece of a call names it, later ones append
    argument text (an object, as Ollama sends, counts as its compact JSON)."""
    if not isinstance(deltas, list):
        return
    for pos, call in enumerate(deltas):
        if not isinstance(call, dict):
            continue
        index = call.get("index", pos)
        if type(index) is not int or not 0 <= index < 128:  # a sane bound: never grow unbounded
            continue
        while len(calls) <= index:
            calls.append(["", "", ""])
        entry = calls[index]
        if isinstance(call.get("id"), str) and call["id"]:
            entry[0] = call["id"]
        fn = call.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str) and fn["name"]:
                entry[1] = fn["name"]
            args = fn.get("arguments")
            if isinstance(args, str):
                entry[2] += args
            elif args is not None:
                entry[2] += compact_json(args)


def json_object(body: bytes) -> dict[str, Any] | None:
    """`body` as a JSON object, or None when it is not one (not JSON, not UTF-8, a list...)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def listed_names(body: bytes, list_key: str, name_key: str) -> list[str] | None:
    """The names in a listing shaped `{list_key: [{name_key: "name", ...}, ...]}`, in order.

    None when the body is not such an object; entries that are not objects or have no non-empty
    string name are skipped (a listing with one odd entry still names the others).
    """
    doc = json_object(body)
    items = doc.get(list_key) if doc is not None else None
    if not isinstance(items, list):
        return None
    return [item[name_key] for item in items
            if isinstance(item, dict) and isinstance(item.get(name_key), str) and item[name_key]]
