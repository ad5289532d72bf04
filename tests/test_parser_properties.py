"""Property tests: the stream decoders (sse.py) and every dialect parser, fed whatever a server,
a proxy or a cut connection can send, raise nothing but `MalformedEvent` and always classify.

What a parser must do with any payload: return NO_OUTPUT / OUTPUT / VISIBLE or raise
MalformedEvent; leave its counters None or a non-negative int, its response id None or a string,
its error None or a non-empty string (set, with NO_OUTPUT, for every error payload). A user
treats any other exception as an unexpected failure and misfiles the request, and a count that
is not an int breaks the record built from it.

Framing: the user's reader buffers bytes as they arrive and hands the decoder complete lines
(`reader_lines` below does the same), so however the body is split into TCP reads, the decoder
must see, and produce, the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import helpers.hypothesis_profiles  # noqa: F401  (registers and loads the settings profile)
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from capacity_plugins.contracts.dialects import TritonFields
from capacity_plugins.dialects import (
    DIALECTS,
    NO_OUTPUT,
    OUTPUT,
    VISIBLE,
    MalformedEvent,
    Parser,
    get_dialect,
)
from capacity_plugins.dialects.framing import NDJSONDecoder, SSEDecoder

# pure computation, no process and no timing: at the lowest CPU priority beside the measured
# sweeps, whose idle core it uses (tests/README.md)
pytestmark = pytest.mark.cpu

# -- the reader, as users.py reads a streamed body ---------------------------------------------------


def reader_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Lines in the order the user's reader hands them over: every complete line without its
    "\\n" as soon as its bytes are in; at the end of the body, a last line without "\\n" as is."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        cut = buf.rfind(b"\n")
        if cut >= 0:
            block = bytes(buf[: cut + 1])
            del buf[: cut + 1]
            yield from block.split(b"\n")[:-1]
    if buf:
        yield bytes(buf)


def decode(decoder: SSEDecoder | NDJSONDecoder, lines: Iterable[bytes]) -> list[bytes]:
    out = [d for d in (decoder.feed(line) for line in lines) if d is not None]
    tail = decoder.flush()
    return out + ([tail] if tail is not None else [])


@st.composite
def split(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    """`raw` cut at arbitrary byte offsets (empty reads included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def test_reader_lines_helper_matches_the_reader() -> None:
    # The helper is only worth something if it splits like the reader: complete lines without
    # "\n" (a "\r" stays), a last unterminated line at the end, nothing for a trailing "\n".
    assert list(reader_lines([b"data: a\r", b"\n\r\ndata", b": b\n", b"tail"])) == [
        b"data: a\r", b"\r", b"data: b", b"tail"]
    assert list(reader_lines([b"x\n", b""])) == [b"x"]


# -- payload strategies ------------------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # JSON strings (no lone surrogates)
huge = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**30)])
numbers = st.integers(-(2**70), 2**70) | huge | st.floats(allow_nan=False, allow_infinity=False)
leaves = st.none() | st.booleans() | numbers | texts
any_json = st.recursive(leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts, kids, max_size=4),
                        max_leaves=10)


def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that is usually right and otherwise any JSON value at all (the wrong type)."""
    return valid | any_json


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with any subset of these fields, each possibly of the wrong type."""
    return st.fixed_dictionaries({}, optional={k: field(v) for k, v in fields.items()})


counts = st.integers(0, 100_000)
error_payload = texts | obj(message=texts, type=texts, code=st.integers(400, 599))

_openai_message = obj(role=st.just("assistant"), content=texts | st.none(), reasoning_content=texts, reasoning=texts,
                      tool_calls=st.lists(obj(index=st.integers(0, 3), id=texts, type=st.just("function"),
                                              function=obj(name=texts, arguments=texts)), max_size=2))
OPENAI = obj(
    id=texts,
    object=st.sampled_from(["chat.completion.chunk", "chat.completion", "text_completion", "error"]),
    choices=st.lists(obj(index=st.just(0), delta=_openai_message, message=_openai_message, text=texts,
                         finish_reason=st.sampled_from([None, "stop", "length"])), max_size=2),
    usage=obj(prompt_tokens=counts, completion_tokens=counts, total_tokens=counts) | st.none(),
    error=error_payload,
    message=texts,
)
_tgi_token = obj(id=st.integers(0, 50_000), text=texts, special=st.booleans(), logprob=st.floats(-50, 0))
TGI = obj(
    index=st.integers(0, 100),
    token=_tgi_token,
    generated_text=texts | st.none(),
    details=obj(generated_tokens=counts, finish_reason=texts, prefill=st.lists(_tgi_token, max_size=3)) | st.none(),
    error=texts,
    error_type=texts,
)
_ollama_message = obj(role=st.just("assistant"), content=texts, thinking=texts,
                      tool_calls=st.lists(obj(function=obj(name=texts, arguments=any_json)), max_size=2))
OLLAMA = obj(model=texts, message=_ollama_message, response=texts, thinking=texts, done=st.booleans(),
             done_reason=texts, eval_count=counts, prompt_eval_count=counts, error=texts)

# Triton generate: the model's outputs (a one-element tensor is its value, a longer one a list),
# the vLLM backend's optional finish_reason ("None" until the last response), an echoed id.
TRITON = obj(model_name=texts, model_version=st.just("1"), text_output=texts | st.lists(texts, max_size=2), id=texts,
             finish_reason=st.sampled_from(["None", "length", "stop"]) | st.lists(texts, max_size=2),
             error=error_payload)

# Embeddings and rerank (dialects/embeddings.py): one whole answer with an entry per item.
_vector = st.lists(st.floats(-1, 1), max_size=3)
EMBEDDINGS = obj(id=texts, object=st.just("list"), model=texts,
                 data=st.lists(obj(index=st.integers(0, 8), object=st.just("embedding"), embedding=_vector), max_size=3),
                 usage=obj(prompt_tokens=counts, total_tokens=counts) | st.none(), error=error_payload)
_ranked = obj(index=st.integers(0, 8), relevance_score=st.floats(0, 1), score=st.floats(0, 1), document=texts)
RERANK = obj(id=texts, model=texts, results=st.lists(_ranked, max_size=3), usage=obj(total_tokens=counts),
             error=error_payload) | st.lists(_ranked, max_size=3)
DOCS = {"openai-chat": OPENAI, "openai-completions": OPENAI, "tgi": TGI, "ollama": OLLAMA, "ollama-generate": OLLAMA,
        "triton-generate": TRITON, "openai-embeddings": EMBEDDINGS, "tei-embed": st.lists(_vector, max_size=3),
        "rerank": RERANK, "tei-rerank": RERANK}
NAMES = sorted(DIALECTS)


def dumps(doc: Any) -> bytes:
    # The stdlib writes integers of any size (orjson stops at 64 bits): a server may too.
    return json.dumps(doc, ensure_ascii=False).encode()


# -- the parser contract -----------------------------------------------------------------------------


def parse(name: str, stream: bool, body: bytes, keep_text: bool) -> tuple[Parser, int | None]:
    """Parse one payload; (parser, what it carried), None when it was MalformedEvent."""
    p = get_dialect(name).parser(stream)
    if keep_text:
        p.keep_text()
    try:
        what: int | None = p.event(body) if stream else p.full(body)
    except MalformedEvent:
        what = None
    check_state(p, what)
    return p, what


def check_state(p: Parser, what: int | None) -> None:
    assert what is None or (type(what) is int and what in (NO_OUTPUT, OUTPUT, VISIBLE)), what
    for counter in ("usage_output_tokens", "continuous_output_tokens", "prompt_tokens", "chunk_tokens"):
        value = getattr(p, counter)
        assert value is None or (type(value) is int and 0 <= value < 2**63), (counter, value)
    assert p.response_id is None or type(p.response_id) is str, p.response_id
    assert p.error is None or (type(p.error) is str and p.error), p.error
    assert type(p.done) is bool
    assert p.texts is None or all(type(t) is str for t in p.texts)
    if p.error is not None:
        assert what == NO_OUTPUT


def error_payload_of(doc: Any) -> bool:
    """Whether a decoded document is one that reports an error (as the servers send them)."""
    if isinstance(doc, list) and doc:  # TGI /generate's list of one
        doc = doc[0]
    return isinstance(doc, dict) and doc.get("error") is not None


_DEEP_ERROR = b'{"error": ' + b"[" * 1000 + b"]" * 1000 + b"}"  # str() of it: RecursionError
# orjson writes 255 levels at most: its TypeError escaped keep_message_text (--tokenizer runs)
_DEEP_CALLS = b'{"tool_calls": [{"function": {"arguments": ' + b"[" * 300 + b"]" * 300 + b"}}]}"
_DEEP_ARGUMENTS = b'{"choices": [{"delta": ' + _DEEP_CALLS + b', "message": ' + _DEEP_CALLS + b'}], "message": ' + \
    _DEEP_CALLS + b"}"


def parse_both(name: str, body: bytes, keep_text: bool) -> list[tuple[Parser, int | None]]:
    """The payload as a stream event and as a whole non-streamed body."""
    return [parse(name, stream, body, keep_text) for stream in (True, False)]


@pytest.mark.parametrize("name", NAMES)
def test_random_bytes(name: str) -> None:
    @given(body=st.binary(max_size=200), keep_text=st.booleans())
    @example(body=_DEEP_ERROR, keep_text=False)
    @example(body=_DEEP_ARGUMENTS, keep_text=True)
    @example(body=b"\xff\xfe\x00", keep_text=True)  # not UTF-8
    @example(body=b"[DONE]", keep_text=False)
    @example(body=b"", keep_text=False)
    def run(body: bytes, keep_text: bool) -> None:
        parse_both(name, body, keep_text)

    run()


@pytest.mark.parametrize("name", NAMES)
def test_documents_with_wrong_types_anywhere(name: str) -> None:
    docs = DOCS[name] | any_json
    if name == "tgi":  # /generate may answer a list of one object
        docs = docs | st.lists(DOCS[name], max_size=2)

    # Regressions, each an exception other than MalformedEvent, or a state the record cannot
    # take, in the parsers before the fix; all found by this test except the last one.
    @given(doc=docs, keep_text=st.booleans())
    @example(doc={"choices": True}, keep_text=False)  # TypeError: 'bool' object is not subscriptable
    @example(doc={"choices": {"": None}}, keep_text=False)  # KeyError: 0
    @example(doc={"choices": "0"}, keep_text=False)  # full(): AttributeError: 'str' object has no attribute 'get'
    @example(doc={"choices": [None]}, keep_text=False)  # full(): AttributeError on None
    @example(doc={"choices": [{"delta": True, "message": True}]}, keep_text=False)  # AttributeError on a bool
    @example(doc={"usage": 1}, keep_text=False)  # AttributeError: 'int' object has no attribute 'get'
    @example(doc={"usage": {"prompt_tokens": []}}, keep_text=False)  # a list stored as prompt_tokens
    @example(doc={"id": []}, keep_text=False)  # a list stored as the response id
    @example(doc={"error": ""}, keep_text=False)  # an error recorded as "" (every dialect)
    @example(doc={"details": {"generated_tokens": [[], -(10**30)]}}, keep_text=False)  # TGI: a list as the count
    @example(doc={"done": True, "eval_count": []}, keep_text=False)  # Ollama: a list as the count
    @example(doc={"token": {"text": ["x"]}}, keep_text=True)  # TGI: generated_text() TypeError joining a list
    @example(doc={"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": "5"}},
             keep_text=False)  # TypeError: str - int (found reading _usage; the test found its siblings)
    def run(doc: Any, keep_text: bool) -> None:
        for stream, (p, what) in zip((True, False), parse_both(name, dumps(doc), keep_text), strict=True):
            if error_payload_of(doc) and (isinstance(doc, dict) or not stream):  # a list is no stream event
                assert what == NO_OUTPUT and p.error, "an error payload must be recorded as an error"

    run()


@pytest.mark.parametrize("name", NAMES)
def test_truncated_and_non_utf8_documents(name: str) -> None:
    @given(raw=DOCS[name].map(dumps), data=st.data(), keep_text=st.booleans())
    def run(raw: bytes, data: st.DataObject, keep_text: bool) -> None:
        cut = data.draw(st.integers(0, len(raw)), label="cut")
        parse_both(name, raw[:cut], keep_text)
        pos = data.draw(st.integers(0, len(raw)), label="pos")
        parse_both(name, raw[:pos] + b"\xc3\x28" + raw[pos:], keep_text)  # an invalid UTF-8 sequence

    run()


@pytest.mark.parametrize(
    ("name", "stream", "body"),
    [
        ("openai-chat", True, b'{"error": {"message": "boom"}}'),
        ("openai-chat", False, b'{"error": "overloaded"}'),
        ("openai-chat", True, b'{"error": {"message": ""}}'),
        ("openai-chat", True, b'{"error": {"code": 500}}'),
        ("openai-chat", True, b'{"error": ""}'),
        # vLLM's ErrorResponse without the "error" wrapper
        ("openai-chat", True, b'{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}'),
        ("openai-completions", False, b'{"object": "error", "message": "", "code": 400}'),
        ("tgi", True, b'{"error": "Input validation error", "error_type": "validation"}'),
        ("tgi", False, b'[{"error": "overloaded", "error_type": "overloaded"}]'),
        ("tgi", True, b'{"error": {"message": "nested"}}'),
        ("ollama", True, b'{"error": "model not found"}'),
        ("ollama-generate", False, b'{"error": 500}'),
        ("triton-generate", True, b'{"error": "in-flight batching failed"}'),
        ("triton-generate", False, b'{"error": ""}'),
    ],
)
def test_error_payloads_set_a_non_empty_error(name: str, stream: bool, body: bytes) -> None:
    p, what = parse(name, stream, body, keep_text=False)
    assert what == NO_OUTPUT and p.error


def test_a_null_error_member_is_not_an_error() -> None:
    p, what = parse("openai-chat", True, b'{"id": "r", "choices": [{"delta": {"content": "hi"}}], "error": null}',
                    keep_text=False)
    assert what == VISIBLE and p.error is None


# -- framing: split anywhere, same events ------------------------------------------------------------

_no_newline = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))
_eol = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def sse_stream(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A valid SSE body and the payloads it carries."""
    raw, payloads = b"", []
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 2))):  # comments and fields that carry no data
            raw += draw(st.sampled_from([b": keep-alive", b"event: message", b"id: 7", b"retry: 100", b":"]))
            raw += draw(_eol)
        data = draw(st.lists(_no_newline, max_size=3))
        for value in data:
            # "data:" then one optional space, which is not part of the value (the SSE spec)
            raw += b"data:" + (b" " if value[:1] == b" " else draw(st.sampled_from([b" ", b""]))) + value
            raw += draw(_eol)
        if data:
            payloads.append(b"\n".join(data))
        raw += draw(_eol)
    if payloads and draw(st.booleans()):  # a body that ends without the last blank line
        raw = raw.removesuffix(b"\r\n").removesuffix(b"\n")
    return raw, payloads


@st.composite
def ndjson_stream(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A valid NDJSON body (blank lines between documents allowed) and its documents."""
    docs = draw(st.lists(any_json.map(lambda d: json.dumps(d).encode()), max_size=6))
    raw = b""
    for d in docs:
        raw += draw(st.sampled_from([b"", b"\n", b"\r\n"])) + d + draw(_eol)
    if docs and draw(st.booleans()):  # no newline after the last document
        raw = raw.removesuffix(b"\r\n").removesuffix(b"\n")
    return raw, docs


@given(body=sse_stream(), data=st.data())
@example(body=(b"data: a\r\n\r\ndata: b\n", [b"a", b"b"]), data=None)
def test_sse_split_anywhere_gives_the_same_events(body: tuple[bytes, list[bytes]], data: st.DataObject | None) -> None:
    raw, payloads = body
    assert decode(SSEDecoder(), reader_lines([raw])) == payloads
    if data is not None:
        chunks = data.draw(split(raw), label="chunks")
        assert decode(SSEDecoder(), reader_lines(chunks)) == payloads


@given(body=ndjson_stream(), data=st.data())
def test_ndjson_split_anywhere_gives_the_same_documents(body: tuple[bytes, list[bytes]], data: st.DataObject) -> None:
    raw, docs = body
    chunks = data.draw(split(raw), label="chunks")
    assert decode(NDJSONDecoder(), reader_lines(chunks)) == decode(NDJSONDecoder(), reader_lines([raw])) == docs


@pytest.mark.parametrize("decoder", [SSEDecoder, NDJSONDecoder])
def test_decoders_take_any_lines_with_or_without_their_terminator(decoder: type) -> None:
    # The reader hands over lines without "\n" (buffered path) or with it (readline path); both
    # must decode alike, whatever the bytes.
    @given(lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12))
    @example(lines=[b"data: x\r", b"\r", b"data:", b""])
    def run(lines: list[bytes]) -> None:
        bare = decode(decoder(), lines)
        assert decode(decoder(), [line + b"\n" for line in lines]) == bare
        assert all(type(d) is bytes for d in bare)

    run()


def frame(name: str, payloads: list[bytes]) -> bytes:
    if get_dialect(name).parser(True).framing == "ndjson":
        return b"".join(p + b"\n" for p in payloads)
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def run_stream(name: str, lines: Iterable[bytes]) -> tuple[list[Any], dict[str, Any]]:
    """What the user's loop sees: each event's classification and chunk count, up to the first
    malformed event or error; then the parser's final state."""
    p = get_dialect(name).parser(True)
    p.keep_text()
    decoder = SSEDecoder() if p.framing == "sse" else NDJSONDecoder()
    seen: list[Any] = []
    try:
        for payload in decode(decoder, lines):
            seen.append((p.event(payload), p.chunk_tokens))
            if p.error is not None:
                break
    except MalformedEvent:
        seen.append("malformed")
    state = {k: getattr(p, k) for k in ("response_id", "usage_output_tokens", "continuous_output_tokens",
                                        "prompt_tokens", "error", "done")}
    return seen, {**state, "text": p.generated_text()}


def readline_lines(raw: bytes) -> list[bytes]:
    """Lines as the reader's fallback path (`readline(b"\\n")`) hands them over: with their "\\n"."""
    *complete, last = raw.split(b"\n")
    return [line + b"\n" for line in complete] + ([last] if last else [])


@pytest.mark.parametrize("name", NAMES)
def test_a_stream_split_anywhere_parses_the_same(name: str) -> None:
    @given(docs=st.lists(DOCS[name].map(dumps), min_size=1, max_size=4), data=st.data())
    def run(docs: list[bytes], data: st.DataObject) -> None:
        raw = frame(name, docs)
        whole = run_stream(name, reader_lines([raw]))
        assert run_stream(name, reader_lines(data.draw(split(raw), label="chunks"))) == whole
        assert run_stream(name, readline_lines(raw)) == whole

    run()


# -- Triton: one generation streamed as deltas, or as the whole text so far -------------------------


def triton_events(pieces: list[str], cumulative: bool) -> list[bytes]:
    """Events of a generation that produced `pieces` in turn ("" = a response that added nothing)."""
    out, so_far = [], ""
    for piece in pieces:
        so_far += piece
        out.append(dumps({"model_name": "m", "model_version": "1", "text_output": so_far if cumulative else piece}))
    return out


def triton_run(outputs: str, events: list[bytes]) -> tuple[list[int], str | None]:
    p = get_dialect("triton-generate", TritonFields(outputs=outputs)).parser(True)
    p.keep_text()
    return [p.event(e) for e in events], p.generated_text()


@given(pieces=st.lists(texts, min_size=1, max_size=8))
@example(pieces=["a", "", "a", "ab"])  # a repeated delta, a response that added nothing
def test_triton_deltas_and_cumulative_outputs_give_the_same_events_and_text(pieces: list[str]) -> None:
    # Told which it is, the parser sees one output event per piece that added text, either way.
    expected = ([VISIBLE if piece else NO_OUTPUT for piece in pieces], "".join(pieces))
    assert triton_run("delta", triton_events(pieces, cumulative=False)) == expected
    assert triton_run("cumulative", triton_events(pieces, cumulative=True)) == expected


@given(pieces=st.lists(texts, min_size=1, max_size=8))
@example(pieces=["", "a", "b", "", "c"])
def test_triton_auto_reads_a_cumulative_stream_as_cumulative(pieces: list[str]) -> None:
    # A cumulative stream only ever extends or repeats its text, so from its first extension on
    # `auto` reads it as cumulative. Before that, a repeat may as well be a repeated delta: left out.
    first = next((i for i, piece in enumerate(pieces) if piece), len(pieces))
    assume(first + 1 >= len(pieces) or pieces[first + 1])
    events = triton_events(pieces, cumulative=True)
    assert triton_run("auto", events) == triton_run("cumulative", events)


@given(pieces=st.lists(texts.filter(bool), min_size=1, max_size=8))
def test_triton_auto_reads_deltas_as_deltas(pieces: list[str]) -> None:
    # Deltas that neither extend nor repeat the one before (the usual case: the one that tells).
    assume(all(not b.startswith(a) and not a.startswith(b) for a, b in zip(pieces, pieces[1:], strict=False)))
    assert triton_run("auto", triton_events(pieces, cumulative=False)) == ([VISIBLE] * len(pieces), "".join(pieces))


# -- model listings ----------------------------------------------------------------------------------

_tensor = obj(name=texts, datatype=st.sampled_from(["BYTES", "INT32", "BOOL"]), shape=st.lists(st.integers(-1, 8)))
LISTINGS = obj(object=st.just("list"), data=st.lists(obj(id=texts, object=st.just("model")), max_size=3),
               models=st.lists(obj(name=texts, model=texts), max_size=3), model_id=texts,
               name=texts, versions=st.lists(texts, max_size=2), platform=texts,  # Triton model metadata
               inputs=st.lists(_tensor, max_size=3), outputs=st.lists(_tensor, max_size=2)) | any_json


@pytest.mark.parametrize("name", NAMES)
def test_model_listings_never_raise(name: str) -> None:
    parse_models = get_dialect(name).parse_models

    @given(body=st.binary(max_size=120) | LISTINGS.map(dumps))
    @example(body=b'{"data": [' + b"[" * 1000 + b"]" * 1000 + b"]}")
    def run(body: bytes) -> None:
        names = parse_models(body)
        assert names is None or all(type(n) is str and n for n in names), names

    run()
