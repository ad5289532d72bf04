"""The body reader's hot path: blocks of complete lines → the dialect's parser, and their stamps.

The reader (client/stream.py) hands over every complete line it has, as one block, with the time
the receive that brought them returned. Everything in a block shares that stamp, so the
bookkeeping is per block, not per chunk. What costs is recognising the chunks, and most of them
are one shape: vLLM, SGLang and OpenAI write the same bytes for every token of a response —

    data: {"id":"chatcmpl-…","object":"chat.completion.chunk","created":…,"model":"…",
           "choices":[{"index":0,"delta":{"content":"<text>"},"logprobs":null,"finish_reason":null}]}

— and only `<text>` changes. So:

1. **Learn the envelope.** Every chunk goes through the full parse (framing, orjson, the
   dialect's rules) until one that carried output lets the parser name its envelope:
   `Parser.envelope` finds the text's bytes in the payload and *proves* the (prefix, suffix)
   around them on its own code, with probe texts (dialects/openai.py). Dialects without an
   envelope (TGI, Ollama: their chunks differ in more than the text) always take the full parse.
2. **Match runs of it.** Where a line starts with `data: ` + prefix (while no event is half
   built), the text's end is the next `"` (memchr), the suffix + blank line must follow byte for
   byte (memcmp); a text holding an escaped quote is found by the line's end instead. A run of
   such events costs a few C calls per chunk and no JSON parse.
3. **Check the texts all at once.** The run's texts, joined, must each be a non-empty JSON
   string body — valid UTF-8, no control character, quotes and backslashes only in escapes
   orjson accepts (`\\" \\\\ \\/ \\b \\f \\n \\r \\t`, `\\uXXXX` outside the surrogates, or a
   surrogate pair). Such a text cannot change the JSON around it, so each event is exactly the
   proven envelope with another text: the parser's result (`what`, chunk_tokens None, the
   decoded text kept under --tokenizer) is known without parsing it.
4. **Anything else is parsed in full**, in order: a text that fails the check (checked one by one
   when the joined check fails), a line that is not the envelope, multi-line or CRLF events,
   comments, the role / finish / usage chunks, `[DONE]`. The common `data: X` + blank line is
   framed inline; other lines go through `SSEDecoder`. The full parse also relearns the envelope
   when it changes (reasoning → content, a tool call), up to `LEARN_TRIES` times a response.

tests/test_fastpath_properties.py checks that this and the plain line-by-line full parse agree on
every block of every stream, including streams built to look like the envelope.
"""

from __future__ import annotations

import re
from itertools import repeat

import orjson

from capacity_plugins.contracts.records import Timings
from capacity_plugins.dialects.base import OUTPUT, REASONING, VISIBLE, MalformedEvent, Parser
from capacity_plugins.dialects.framing import NDJSONDecoder, SSEDecoder

# Envelopes one response may learn: reasoning → content → a tool call is 3; a server whose chunks
# differ in more than the text (no envelope) costs this many failed attempts, then none.
LEARN_TRIES = 6

_CONTROL = bytes(range(32))
# Every escape orjson accepts, matched left to right as JSON reads them (so `\\` is taken before
# it could be taken for the start of `\"`): the simple ones, \uXXXX outside the surrogates, or a
# high + low surrogate pair (orjson refuses a lone one). One pass, however many kinds there are.
_ESCAPE = re.compile(
    rb'\\(?:["\\/bfnrt]|u(?:[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(?![dD][89a-fA-F])[0-9a-fA-F]{4}))')
_DATA = b"data: "


def plain_texts(texts: list[bytes]) -> bool:
    """Whether every one of `texts` is a non-empty JSON string body the envelope contract covers
    (base.Parser.envelope): valid UTF-8, no control character, `"` and `\\` only in escapes."""
    if b"" in texts:
        return False
    joined = b"\x00".join(texts)  # a separator no valid text holds (a control character)
    if not joined.isascii():
        try:
            joined.decode()
        except UnicodeDecodeError:
            return False
    rest = joined
    if b"\\" in rest:
        # A backslash left over is one orjson would refuse, or one we do not vouch for: the full
        # parse decides.
        rest = _ESCAPE.sub(b"", rest)
        if b"\\" in rest:
            return False
    if b'"' in rest:
        return False
    return len(rest.translate(None, _CONTROL)) == len(rest) - (len(texts) - 1)


def decoded(texts: list[bytes]) -> list[str]:
    """Plain texts (see plain_texts) as the strings the full parse would keep."""
    return [t.decode() if b"\\" not in t else orjson.loads(b'"' + t + b'"') for t in texts]


def stamp(t: Timings, parser: Parser, what: int, now: int) -> None:
    """One output event (`what` ≥ OUTPUT) at `now`: first token / first visible, the channel counts,
    its stamp and the tokens the server said it carried. The one definition for the fast reader
    and the line-by-line one (client/stream.py)."""
    if t.first_token_ns is None:
        t.first_token_ns = now
    if what == VISIBLE:
        if t.first_visible_ns is None:
            t.first_visible_ns = now
        t.visible_events += 1
        t.last_visible_ns = now
    elif what == REASONING:
        t.reasoning_events += 1
    t.token_ns.append(now)
    t.chunk_tokens.append(parser.chunk_tokens)


class BodyEvents:
    """One streamed body: blocks of complete lines in, parser events and output stamps out.

    `block()` and `finish()` stamp on `t` what the line-by-line loop did (tests/
    test_fastpath_properties.py): every output event gets its block's stamp, in order;
    first_token / first_visible are the first such stamps; `reads` / `backlog_reads` count blocks
    that brought output (more than one output: the client was late). Nothing is stamped after
    an error payload; MalformedEvent propagates with the events before it stamped.
    """

    __slots__ = ("parser", "t", "sse", "decoder", "max_line_bytes", "head", "tail", "joint", "what", "tries")

    def __init__(self, parser: Parser, t: Timings, max_line_bytes: int) -> None:
        self.parser = parser
        self.t = t
        self.sse = parser.framing == "sse"
        self.decoder: SSEDecoder | NDJSONDecoder = SSEDecoder() if self.sse else NDJSONDecoder()
        self.max_line_bytes = max_line_bytes
        self.head: bytes | None = None  # b"data: " + prefix, once an envelope is known
        self.tail = b""  # suffix + b"\n\n"
        self.joint = b""  # tail + head: one event's end and the next one's start
        self.what = 0
        self.tries = LEARN_TRIES if self.sse else 0

    # -- the reader's calls --------------------------------------------------------------------

    def block(self, block: bytes, now: int) -> bool:
        """Complete lines (`block` ends with "\\n") that arrived at `now`. True: the server sent an
        error payload (`parser.error`); stop reading. Raises MalformedEvent."""
        t = self.t
        before = len(t.token_ns)
        if self._events(block, now, len(block) <= self.max_line_bytes):
            return True
        arrived = len(t.token_ns) - before
        if arrived:
            t.reads += 1
            t.backlog_reads += arrived > 1
        return False

    def finish(self, rest: bytes, now: int) -> None:
        """The end of the body: a last line without "\\n" (may be empty), then what the framing
        still holds (an event without its blank line)."""
        if rest:
            self._one(self.decoder.feed(rest), now)
        self._one(self.decoder.flush(), now)

    # -- inside ---------------------------------------------------------------------------------

    def _one(self, data: bytes | None, now: int) -> None:
        if data is None or self.parser.error is not None:
            return
        what = self.parser.event(data)
        if what >= OUTPUT:
            self._stamp(what, now)

    def _stamp(self, what: int, now: int) -> None:
        stamp(self.t, self.parser, what, now)

    def _events(self, block: bytes, now: int, fast: bool) -> bool:
        parser = self.parser
        event = parser.event
        decoder = self.decoder
        feed = decoder.feed
        sse = self.sse
        find = block.find
        startswith = block.startswith
        max_line = self.max_line_bytes
        end = len(block)
        pos = 0
        while pos < end:
            head = self.head
            if fast and head is not None and startswith(head, pos) and decoder.idle:
                after = self._run(block, pos, now)
                if after < 0:
                    return True
                if after > pos:
                    pos = after
                    continue
            eol = find(b"\n", pos)
            if eol < 0:
                eol = end
            line = block[pos:eol]
            if len(line) > max_line:
                raise MalformedEvent(f"a line of {len(line)} bytes (over {max_line}): not an event stream")
            pos = eol + 1
            inline = (sse and startswith(b"\n", pos) and line[:6] == _DATA and line[-1:] != b"\r"
                      and decoder.idle)
            if inline:  # `data: X` + blank line: the whole event, framed here
                data: bytes | None = line[6:]
                pos += 1
            else:
                data = feed(line)
                if data is None:
                    continue
            assert data is not None
            what = event(data)
            if what:
                self._stamp(what, now)
            if parser.error is not None:
                return True
            if inline and what >= OUTPUT and self.tries and (head is None or not data.startswith(head[6:])):
                self._learn(data, what)
        return False

    def _learn(self, data: bytes, what: int) -> None:
        self.tries -= 1
        shape = self.parser.envelope(data, what)
        if shape is None:
            return
        prefix, suffix = shape
        if b"\n" in prefix or b"\n" in suffix or suffix[-1:] == b"\r" or not suffix.startswith(b'"'):
            return  # not one SSE line, or not a string slot: never matched
        self.head = _DATA + prefix
        self.tail = suffix + b"\n\n"
        self.joint = self.tail + self.head
        self.what = what

    def _run(self, block: bytes, pos: int, now: int) -> int:
        """Events from `pos` (where `head` starts) that are the envelope with a plain text: stamped,
        and the position after them. `pos` itself when none is; -1 when a text parsed in full was
        an error payload."""
        head, tail, joint = self.head, self.tail, self.joint
        assert head is not None
        lh, lt, lj = len(head), len(tail), len(joint)
        startswith, find = block.startswith, block.find
        texts: list[bytes] = []
        keep = texts.append
        a = pos + lh  # where this event's text starts
        while True:
            q = find(b'"', a)
            if q >= 0 and startswith(joint, q):  # this text's end and the next event's head
                keep(block[a:q])
                a = q + lj
                continue
            if q < 0 or not startswith(tail, q):
                # an escaped quote in the text (its line's end decides), or not the envelope
                eol = find(b"\n", a)
                q = eol + 2 - lt
                if eol < 0 or q < a or not startswith(tail, q):
                    pos = a - lh  # the run ends before this event
                    break
            keep(block[a:q])
            pos = q + lt
            if not startswith(head, pos):
                break
            a = pos + lh
        if not texts:
            return pos
        if plain_texts(texts):
            self._texts(texts, now)
            return pos
        for text in texts:  # in order: the plain ones at once, the others parsed in full
            if plain_texts([text]):
                self._texts([text], now)
            elif self._events(head + text + tail, now, False):
                return -1
        return pos

    def _texts(self, texts: list[bytes], now: int) -> None:
        """What the full parse of these envelope events would have done: `what` each, stamped."""
        t = self.t
        n = len(texts)
        if t.first_token_ns is None:
            t.first_token_ns = now
        if self.what == VISIBLE:
            if t.first_visible_ns is None:
                t.first_visible_ns = now
            t.visible_events += n
            t.last_visible_ns = now
        elif self.what == REASONING:
            t.reasoning_events += n
        t.token_ns.extend(repeat(now, n))
        t.chunk_tokens.extend(repeat(None, n))
        parser = self.parser
        parser.chunk_tokens = None
        if parser.texts is not None:
            parser.texts.extend(decoded(texts))
