"""Property tests: the reader's fast path (dialects/fastpath.py) and the plain full parse agree on
every chunk of every stream — the stamps each event gets, the parser's whole state, where a
malformed event stops the read — however the body is cut into reads.

The reference is the reader as it was before the fast path: every complete line of a block
through SSEDecoder / NDJSONDecoder, every payload through `parser.event`, stamped with its block's
time. Streams are built around the envelopes servers repeat (chat content, reasoning, a tool
call's arguments, completions text) with texts drawn to break them: quotes, backslashes, every
escape, lone surrogates, control characters, invalid UTF-8, empty texts, the envelope's own bytes,
line ends — mixed with every other kind of event (role, finish, usage, errors, [DONE], comments,
multi-line and CRLF events, invalid JSON, another response's envelope).
"""

from __future__ import annotations

import json
from typing import Any

import helpers.hypothesis_profiles  # noqa: F401  (registers and loads the settings profile)
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from capacity_plugins.contracts.records import Timings
from capacity_plugins.dialects import OUTPUT, MalformedEvent, Parser, get_dialect
from capacity_plugins.dialects.fastpath import BodyEvents, plain_texts, stamp
from capacity_plugins.dialects.framing import NDJSONDecoder, SSEDecoder

# pure computation, no process and no timing: at the lowest CPU priority beside the measured
# sweeps, whose idle core it uses (tests/README.md)
pytestmark = pytest.mark.cpu

MAX_LINE = 16 * 1024 * 1024
STATE = ("response_id", "usage_output_tokens", "continuous_output_tokens", "prompt_tokens", "chunk_tokens",
         "error", "done", "finish_reason", "texts")


# -- the reference: line by line, every payload parsed ----------------------------------------------


def reference(name: str, blocks: list[bytes], rest: bytes, keep_text: bool) -> dict[str, Any]:
    parser = get_dialect(name).parser(True)
    if keep_text:
        parser.keep_text()
    t = Timings(sent_unix=0.0, sent_ns=0)
    decoder = SSEDecoder() if parser.framing == "sse" else NDJSONDecoder()

    def stamp_one(what: int, now: int) -> None:
        stamp(t, parser, what, now)  # the reader's own stamping, not a copy of it

    outcome = "done"
    try:
        for now, block in enumerate(blocks, 1):
            before = len(t.token_ns)
            stop = False
            for line in block.split(b"\n")[:-1]:
                if len(line) > MAX_LINE:
                    raise MalformedEvent("long line")
                data = decoder.feed(line)
                if data is None:
                    continue
                what = parser.event(data)
                if what:
                    stamp_one(what, now)
                if parser.error is not None:
                    stop = True
                    break
            if stop:
                outcome = "error"
                break
            arrived = len(t.token_ns) - before
            if arrived:
                t.reads += 1
                t.backlog_reads += arrived > 1
        else:
            now = len(blocks) + 1
            for data in (decoder.feed(rest) if rest else None, decoder.flush()):
                if data is not None and parser.error is None:
                    what = parser.event(data)
                    if what >= OUTPUT:
                        stamp_one(what, now)
    except MalformedEvent:
        outcome = "malformed"
    return summary(parser, t, outcome)


def fast(name: str, blocks: list[bytes], rest: bytes, keep_text: bool) -> tuple[dict[str, Any], BodyEvents]:
    parser = get_dialect(name).parser(True)
    if keep_text:
        parser.keep_text()
    t = Timings(sent_unix=0.0, sent_ns=0)
    events = BodyEvents(parser, t, MAX_LINE)
    outcome = "done"
    try:
        for now, block in enumerate(blocks, 1):
            if events.block(block, now):
                outcome = "error"
                break
        else:
            events.finish(rest, len(blocks) + 1)
    except MalformedEvent:
        outcome = "malformed"
    return summary(parser, t, outcome), events


def summary(parser: Parser, t: Timings, outcome: str) -> dict[str, Any]:
    return {"outcome": outcome, **{k: getattr(parser, k) for k in STATE},
            **{k: getattr(t, k) for k in ("first_token_ns", "first_visible_ns", "token_ns", "chunk_tokens",
                                          "reads", "backlog_reads")}}


def blocks_of(reads: list[bytes]) -> tuple[list[bytes], bytes]:
    """What the reader hands over: after each read, every complete line buffered, as one block."""
    buf = bytearray()
    blocks = []
    for chunk in reads:
        buf += chunk
        cut = buf.rfind(b"\n")
        if cut >= 0:
            blocks.append(bytes(buf[: cut + 1]))
            del buf[: cut + 1]
    return blocks, bytes(buf)


@st.composite
def cuts(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    """`raw` as a server may deliver it: whole, event by event, or cut anywhere."""
    how = draw(st.sampled_from(["whole", "anywhere", "lines"]))
    if how == "whole":
        return [raw]
    if how == "lines":
        parts = raw.split(b"\n\n")
        return [p + b"\n\n" for p in parts[:-1]] + [parts[-1]]
    points = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    bounds = [0, *points, len(raw)]
    return [raw[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# -- streams -----------------------------------------------------------------------------------------

ID = "chatcmpl-0123456789abcdef"
HEAD = '{"id":"' + ID + '","object":"chat.completion.chunk","created":1700000000,"model":"m/x-1"'
CONTENT = HEAD + ',"choices":[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}]}'
REASONING = HEAD + ',"choices":[{"index":0,"delta":{"reasoning_content":"%s"},"logprobs":null,"finish_reason":null}]}'
SGLANG = (HEAD + ',"choices":[{"index":0,"delta":{"role":null,"content":"%s","reasoning_content":null,'
          '"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}')
TOOL = (HEAD + ',"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"%s"}}]},'
        '"logprobs":null,"finish_reason":null}]}')
SPACED = ('{"id": "' + ID + '", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "%s"}, '
          '"finish_reason": null}]}')
COMPLETION = ('{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,'
              '"text":"%s","logprobs":null,"finish_reason":null,"stop_reason":null}]}')
ENVELOPES = [CONTENT, REASONING, SGLANG, TOOL, SPACED]

# Raw JSON string bodies: plain text, valid escapes, and everything a slot must not be taken as.
_texts = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=6).map(lambda s: json.dumps(s, ensure_ascii=False)[1:-1]),
    st.text(max_size=6).map(lambda s: json.dumps(s)[1:-1]),  # \uXXXX escapes, surrogate pairs included
    st.sampled_from(["", " ", "a", "\\n", "\\\\", "\\\"", "\\/", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "\\udc00x",
                     "\\ud83d\\u0041", "\\U0041", "\\x41", "\\", "a\\", "a\\\\", "a\\\\\\", "\"", "a\"b", "\t", "\x00",
                     "\x1f", "\x7f", "\r", "\u2028", "\\u0000", "é", "日本", "\ufffe",
                     '"},"logprobs":null,"finish_reason":null}]}',  # the suffix itself
                     '\\"},"logprobs":null,"finish_reason":null}]}',
                     'x"},"logprobs":null,"finish_reason":"stop"}]}',
                     'a"},"logprobs":null,"finish_reason":null}],"usage":{"completion_tokens":5}}',
                     'b"},"logprobs":null,"finish_reason":null}]}\n\ndata: ' + CONTENT.replace("%s", "c")]),
).map(lambda s: s.encode("utf-8", "surrogatepass")) | st.binary(max_size=6)


@st.composite
def other_event(draw: st.DrawFn, envelope: str) -> bytes:
    """A whole SSE event (with its blank line) that is not a plain text in the envelope."""
    kind = draw(st.sampled_from(["role", "finish", "usage", "done", "comment", "error", "bad", "crlf", "multi",
                                 "other_id", "field", "continuous", "lone_cr", "no_space", "empty"]))
    text = draw(_texts)
    if kind == "role":
        return b'data: ' + HEAD.encode() + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    if kind == "finish":
        return b'data: ' + HEAD.encode() + b',"choices":[{"index":0,"delta":{"content":"' + text + \
            b'"},"finish_reason":"length"}]}\n\n'
    if kind == "usage":
        return b'data: ' + HEAD.encode() + b',"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}\n\n'
    if kind == "done":
        return b"data: [DONE]\n\n"
    if kind == "comment":
        return b": keep-alive\n\n"
    if kind == "error":
        return b'data: {"error":{"message":"boom"}}\n\n'
    if kind == "bad":
        return b"data: {not json\n\n"
    if kind == "crlf":
        return b"data: " + (envelope % "x").encode() + b"\r\n\r\n"
    if kind == "multi":
        return b"data: " + (envelope % "y").encode()[:20] + b"\ndata: " + (envelope % "y").encode()[20:] + b"\n\n"
    if kind == "other_id":
        return b"data: " + (envelope.replace(ID, "chatcmpl-other") % "z").encode() + b"\n\n"
    if kind == "field":
        return b"event: message\nid: 4\ndata: " + (envelope % "w").encode() + b"\n\n"
    if kind == "continuous":
        return b'data: ' + HEAD.encode() + b',"choices":[{"index":0,"delta":{"content":"' + text + \
            b'"}}],"usage":{"completion_tokens":' + str(draw(st.integers(0, 9))).encode() + b"}}\n\n"
    if kind == "lone_cr":
        return b"data: " + (envelope % "v").encode() + b"\r\n\n"
    if kind == "no_space":
        return b"data:" + (envelope % "u").encode() + b"\n\n"
    return b"\n"


@st.composite
def sse_body(draw: st.DrawFn, envelope: str) -> bytes:
    events = []
    for _ in range(draw(st.integers(1, 14))):
        if draw(st.integers(0, 3)):
            events.append(b"data: " + envelope.encode().replace(b"%s", draw(_texts)) + b"\n\n")
        else:
            events.append(draw(other_event(envelope)))
    raw = b"".join(events)
    if draw(st.booleans()):
        raw = raw[: draw(st.integers(0, len(raw)))]  # a cut connection
    return raw


def check(name: str, raw: bytes, reads: list[bytes], keep_text: bool) -> BodyEvents:
    blocks, rest = blocks_of(reads)
    want = reference(name, blocks, rest, keep_text)
    got, events = fast(name, blocks, rest, keep_text)
    assert got == want
    return events


@pytest.mark.parametrize("envelope", ENVELOPES, ids=["content", "reasoning", "sglang", "tool", "spaced"])
def test_chat_fast_path_agrees_with_the_full_parse(envelope: str) -> None:
    @given(raw=sse_body(envelope), data=st.data(), keep_text=st.booleans())
    @example(raw=b"".join(b"data: " + (envelope % t).encode() + b"\n\n" for t in ["a", "b\\n", "c\\\"d", "e"]),
             data=None, keep_text=True)
    def run(raw: bytes, data: st.DataObject | None, keep_text: bool) -> None:
        check("openai-chat", raw, [raw], keep_text)
        if data is not None:
            check("openai-chat", raw, data.draw(cuts(raw), label="reads"), keep_text)

    run()


def test_completions_fast_path_agrees_with_the_full_parse() -> None:
    @given(raw=sse_body(COMPLETION), data=st.data(), keep_text=st.booleans())
    def run(raw: bytes, data: st.DataObject, keep_text: bool) -> None:
        check("openai-completions", raw, data.draw(cuts(raw), label="reads"), keep_text)

    run()


def _envelope_stream(envelope: str, texts: list[bytes]) -> bytes:
    return b"".join(b"data: " + envelope.encode().replace(b"%s", t) + b"\n\n" for t in texts)


@pytest.mark.parametrize("text", [
    b'a\\', b'\\', b'a"b', b'"', b"\t", b"\x00", b"\xc3", b"\xc3(", b"\xed\xa0\x80", b"\\ud800", b"\\udc00",
    b"\\ud83d\\u0041", b"\\U0041", b"\\x", b"", b'\\\\"', b'x"},"logprobs":null,"finish_reason":null}]}',
    b'\\"},"logprobs":null,"finish_reason":null}]}', b"a\r", b"\x7f", b"\\u0000", b"\\ud83d\\ude00", b"\\\\\\\"",
])
def test_texts_crafted_against_the_envelope(text: bytes) -> None:
    # The envelope learned from the first chunks, then a text built to pass for a plain one,
    # alone and amid plain ones, in one read and one read per event.
    for texts in ([b"a", b"b", text], [b"a", b"b", text, b"c", b"d"], [b"a", text, text, b"d"]):
        raw = _envelope_stream(CONTENT, texts) + b"data: [DONE]\n\n"
        events = check("openai-chat", raw, [raw[:400], raw[400:]], keep_text=True)
        check("openai-chat", raw, [raw], keep_text=False)
        check("openai-chat", raw, [e + b"\n\n" for e in raw.split(b"\n\n")], keep_text=True)
        assert events.head is not None  # the envelope was learned: the text met the fast path


@pytest.mark.parametrize("first", [ID.encode(), b"chat.completion.chunk", b"m/x-1", b"object", b"index"])
def test_the_envelope_is_proven_where_the_text_also_appears_elsewhere(first: bytes) -> None:
    # The first text is also the id / object / model string (or a key): its first occurrence in
    # the payload is not the slot, and only the proof on the parser's own code tells them apart.
    raw = _envelope_stream(CONTENT, [first, b"b", b"m/x-2", b"c"]) + b"data: [DONE]\n\n"
    events = check("openai-chat", raw, [raw], keep_text=True)
    assert events.head is not None and events.head.endswith(b'"content":"')


def test_plain_texts() -> None:
    ok = [b"a", b" the", b"caf\xc3\xa9", b"\\n", b"\\\\", b'\\"', b"\\/\\b\\f\\r\\t", b"\\u00e9", b"\\ud83d\\ude00",
          b"\\\\\\\\", b"\x7f"]
    assert plain_texts(ok)
    for text in ok:
        assert plain_texts([text])
    for bad in [b"", b"\\", b"a\\", b"\\\\\\", b'"', b'a"b', b"\t", b"\x00", b"\n", b"\xc3", b"\xff", b"\\ud800",
                b"\\udc00", b"\\ud83d\\u0041", b"\\U0041", b"\\x41", b"\\u12", b'\\\\"']:
        assert not plain_texts([bad]), bad
        assert not plain_texts([b"a", bad, b"b"]), bad
    assert not plain_texts([b"a\\", b'"b'])  # a separator taken for an escaped quote


def test_the_fast_path_is_taken_on_a_vllm_stream() -> None:
    # Not a property: the proof that the comparisons above ran the fast path, not only the full parse.
    texts = [b" tok%d" % i for i in range(256)]
    raw = (b"data: " + (HEAD + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}').encode() + b"\n\n"
           + _envelope_stream(CONTENT, texts) + b"data: [DONE]\n\n")
    base = type(get_dialect("openai-chat").parser(True))

    seen: list[bytes] = []

    class Counting(base):  # type: ignore[valid-type, misc]
        __slots__ = ()

        def event(self, data: bytes) -> int:
            seen.append(data)
            return super().event(data)  # type: ignore[no-any-return]

    parser = Counting()
    t = Timings(sent_unix=0.0, sent_ns=0)
    events = BodyEvents(parser, t, MAX_LINE)
    blocks, rest = blocks_of([raw[:3000], raw[3000:]])
    for now, block in enumerate(blocks, 1):
        assert not events.block(block, now)
    events.finish(rest, 9)
    assert len(t.token_ns) == 256 and parser.done and parser.response_id == ID
    # parsed in full: role, the chunk the envelope was learned on and its two probes, [DONE]
    assert len(seen) == 5, seen


DOCS_NDJSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                           max_leaves=6)
_ollama = st.fixed_dictionaries({}, optional={"message": st.fixed_dictionaries({}, optional={
    "content": st.text(max_size=4), "thinking": st.text(max_size=4)}), "response": st.text(max_size=4),
    "done": st.booleans(), "eval_count": st.integers(0, 9), "error": st.text(max_size=4)}) | DOCS_NDJSON
_tgi = st.fixed_dictionaries({}, optional={"token": st.fixed_dictionaries({}, optional={
    "text": st.text(max_size=4), "special": st.booleans()}), "details": st.none() | st.fixed_dictionaries(
    {"generated_tokens": st.integers(0, 9)}), "error": st.text(max_size=4)}) | DOCS_NDJSON


@pytest.mark.parametrize("name", ["tgi", "ollama", "ollama-generate"])
def test_other_dialects_agree_with_the_full_parse(name: str) -> None:
    docs = _tgi if name == "tgi" else _ollama
    sse = get_dialect(name).parser(True).framing == "sse"

    @given(items=st.lists(docs.map(lambda d: json.dumps(d).encode()) | st.binary(max_size=8), max_size=8),
           data=st.data(), keep_text=st.booleans())
    def run(items: list[bytes], data: st.DataObject, keep_text: bool) -> None:
        sep = data.draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n"]), label="sep")
        raw = b"".join((b"data: " + i if sse else i.replace(b"\n", b"")) + sep for i in items)
        check(name, raw, data.draw(cuts(raw), label="reads"), keep_text)

    run()
