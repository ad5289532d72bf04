"""A hostile LLM server for the fault suite: real sockets on 127.0.0.1, one misbehaviour per mode.

It speaks the OpenAI chat API (`GET /v1/models`, `POST /v1/chat/completions`, streamed or not)
from raw asyncio streams, so a mode can break the exchange at any layer: below HTTP (a reset, a
reply that is not HTTP), in HTTP (an error status, slow headers, an HTTP/1.0 body delimited by
the close) or in the event stream (a malformed line, an 8 MB line, a line that never ends).

The mode is chosen per request by the marker `FAULT:<mode>` anywhere in the request body (a
corpus prompt, or the model name), so one server and one Locust process cover every mode. A
request without a marker (the preflight's) is answered as `ok` and counted as `unmarked`.

The server counts the requests it has read, per mode: `GET /_faults/seen` → `{"mode": n, ...}`
(the listing counts as `models`; the control routes are not counted), `GET /_faults/reading` →
how many connections wait for a request (0 once a client that exited is read to its end), and `GET /_faults/flooded`
→ `{"mode": bytes}`: how much of its most recent endless stream the client took before it hung up. No mode keeps a
connection longer than `HOLD_S`, so a client that never hangs up cannot leave it running.

Run (from tests/): python -m helpers.fault_server [PORT] [--exit-on-stdin-eof] — prints
`ready on URL` once it listens (0 = any free port), as the tests' other servers do
(helpers/servers.py); with the flag it exits when its stdin closes (the test that started it
ended). The tests start it with helpers.faults.FaultServer. Standard library only.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import fcntl
import json
import re
import socket
import struct
import sys
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

# What every mode does, and what the generator must make of it (docs/results.md error kinds).
# kind None = a successful record; status 0 = no HTTP status was ever received.


@dataclass(frozen=True)
class Mode:
    name: str
    does: str
    kind: str | None
    status: int


MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("ok", "a normal stream: role, 5 tokens, finish_reason, usage, [DONE]", None, 200),
    Mode("http_429", "429 with Retry-After: 2 and a JSON error", "http_429", 429),
    Mode("http_500", "500 with a JSON error", "http_5xx", 500),
    Mode("http_503", "503 with a JSON error", "http_5xx", 503),
    Mode("json_error_200", "200 application/json whose body is an error object (stream asked for)", "server_error", 200),
    Mode("html_200", "200 text/html: a proxy's page instead of the API", "server_error", 200),
    Mode("reset_mid_stream", "two events, then a TCP reset (SO_LINGER 0)", "stream_cut", 200),
    Mode("close_mid_stream", "two events, then a clean close without the last chunk or [DONE]", "stream_cut", 200),
    Mode("stall", "headers and one event, then silence past the request timeout", "timeout", 200),
    Mode("slow_headers", "the status line, then one header byte every 100 ms, never finished", "timeout", 0),
    Mode("malformed_line", "a `data: {not json` event mid-stream", "malformed", 200),
    Mode("truncated_json", "an event whose JSON is cut off mid-object, then [DONE]", "malformed", 200),
    Mode("non_utf8", "an event with bytes that are not UTF-8 inside its JSON string", "malformed", 200),
    Mode("no_done", "tokens, then a clean end of body: no finish_reason, no [DONE]", "stream_cut", 200),
    Mode("http10_close", "HTTP/1.0, no length: the full stream delimited by the close", None, 200),
    Mode("line_8mb", "one 8 MB content event (under the 16 MiB line limit), then the usual end", None, 200),
    Mode("endless_line", "`data: ` then bytes without a newline, as fast as they are read", "malformed", 200),
    Mode("keepalive_flood", "`: keep-alive` comment lines as fast as they are read, never an event", "timeout", 200),
    Mode("endless_event", "`data:` lines of 1 KiB as fast as they are read, never the blank line", "malformed", 200),
    Mode("error_event", "200 stream: one token, then an error event", "server_error", 200),
    Mode("not_http", "reads the request, answers an SSH banner and garbage, closes", "protocol", 0),
    Mode("echo_401", "401 whose JSON body echoes the credential headers", "http_4xx", 401),
    Mode("echo_stream_error", "200 stream whose error event echoes the credential headers",
         "server_error", 200),
    # The client keeps 300 characters of a server's text: the echoed key straddles that cut.
    Mode("echo_401_at_cut", "401 whose body echoes the bearer token across its 300th character", "http_4xx", 401),
    Mode("echo_stream_error_at_cut", "an error event whose message echoes the bearer token across its 300th character",
         "server_error", 200),
    # ... and across the 200th, where the preflight cuts (its console message)
    Mode("echo_401_at_cut_200", "401 whose body echoes the bearer token across its 200th character", "http_4xx", 401),
)}
# Not a server mode: nothing listens (`connect`, status 0).
REFUSED = Mode("refused", "no server on the port", "connect", 0)
# Streams for the signal tests: 20 tokens 100 ms apart (requests are in flight when the stop comes).
SLOW = Mode("slow", "a normal stream of 20 tokens, 100 ms apart", None, 200)

HOLD_S = 60.0  # no connection is held longer than this, whatever the client does
TOKENS = 5
MARKER = re.compile(rb"FAULT:([a-z0-9_]+)")
_SEEN: collections.Counter[str] = collections.Counter()
# Connections waiting in read_request: after the client exits, 0 means every request it sent has
# been read (a busy loop, e.g. under the floods, reads some only after the client gave up on them)
_READING = 0
# mode → bytes the client took from its most recent flood (what a client that never gives up buffers)
_FLOODED: dict[str, int | None] = {}  # None: still flooding


# -- HTTP pieces ---------------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    body = b""
    n = int(headers.get("content-length") or 0)
    if n:
        body = await reader.readexactly(n)
    return Request(method, path, headers, body)


def response_head(status: int, reason: str, headers: dict[str, str], version: str = "HTTP/1.1") -> bytes:
    lines = [f"{version} {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def whole(status: int, reason: str, body: bytes, ctype: str, **extra: str) -> bytes:
    headers = {"Content-Type": ctype, "Content-Length": str(len(body)), **{k.replace("_", "-"): v for k, v in extra.items()}}
    return response_head(status, reason, headers) + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = response_head(200, "OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked",
                                        "Cache-Control": "no-cache"})
LAST_CHUNK = b"0\r\n\r\n"


def event(doc: object) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def _chunk_doc(rid: str, delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"id": rid, "object": "chat.completion.chunk", "model": "fault-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def ok_events(rid: str, n: int = TOKENS, *, finish: bool = True, done: bool = True) -> list[bytes]:
    out = [event(_chunk_doc(rid, {"role": "assistant", "content": ""}))]
    for i in range(n):
        last = finish and i == n - 1
        out.append(event(_chunk_doc(rid, {"content": f"t{i} "}, "length" if last else None)))
    if done:
        out.append(event({"id": rid, "object": "chat.completion.chunk", "choices": [],
                          "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7}}))
        out.append(b"data: [DONE]\n\n")
    return out


def full_body(rid: str) -> bytes:
    return json.dumps({"id": rid, "object": "chat.completion", "model": "fault-model",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "t " * TOKENS},
                                    "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": TOKENS, "total_tokens": TOKENS + 7}}).encode()


def echoed_credentials(req: Request) -> str:
    """What a careless server writes back: the Authorization header (and, for Basic, the decoded
    user:password) and the other credentials it was sent, first, so the client's 300-character
    cut keeps them."""
    auth = req.headers.get("authorization", "")
    parts = [f"Authorization: {auth}"]
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "basic":
        with contextlib.suppress(ValueError):
            parts.append(f"decoded: {base64.b64decode(token).decode()}")
    for name in ("x-gateway-key", "x-route"):
        if name in req.headers:
            parts.append(f"{name}: {req.headers[name]}")
    return "; ".join(parts) + " is not valid here"


# -- the modes -------------------------------------------------------------------------------------------

Writer = asyncio.StreamWriter
Handler = Callable[[Request, asyncio.StreamReader, Writer, str], Awaitable[bool]]  # True: keep the connection


async def send(w: Writer, data: bytes) -> None:
    w.write(data)
    await w.drain()


async def until_client_leaves(reader: asyncio.StreamReader, hold_s: float = HOLD_S) -> None:
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
        await asyncio.wait_for(reader.read(), hold_s)


async def m_ok(req: Request, r: asyncio.StreamReader, w: Writer, rid: str, n: int = TOKENS, gap_s: float = 0.005) -> bool:
    if not json.loads(req.body or b"{}").get("stream"):
        await send(w, whole(200, "OK", full_body(rid), "application/json"))
        return True
    await send(w, STREAM_HEAD)
    for ev in ok_events(rid, n):
        await send(w, chunk(ev))
        await asyncio.sleep(gap_s)
    await send(w, LAST_CHUNK)
    return True


async def m_slow(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    return await m_ok(req, r, w, rid, n=20, gap_s=0.1)


def _status(code: int, reason: str, **extra: str) -> Handler:
    async def h(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
        body = json.dumps({"error": {"message": f"fault server: {code} {reason}", "type": "server_error", "code": code}})
        await send(w, whole(code, reason, body.encode(), "application/json", **extra))
        return True
    return h


async def m_json_error_200(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    body = json.dumps({"error": {"message": "fault server: the model is loading", "type": "server_error"}})
    await send(w, whole(200, "OK", body.encode(), "application/json"))
    return True


async def m_html_200(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    page = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"
    await send(w, whole(200, "OK", page, "text/html; charset=utf-8"))
    return True


async def m_reset_mid_stream(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD + b"".join(chunk(e) for e in ok_events(rid)[:2]))
    await asyncio.sleep(0.05)
    sock = w.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.transport.abort()  # RST, not FIN
    return False


async def m_close_mid_stream(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD + b"".join(chunk(e) for e in ok_events(rid)[:2]))
    await asyncio.sleep(0.05)
    return False  # FIN: the chunked body never got its last chunk


async def m_stall(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD + chunk(ok_events(rid)[0]))
    await until_client_leaves(r)
    return False


async def m_slow_headers(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Slow: ")
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end and not r.at_eof():
        await send(w, b"z")
        await asyncio.sleep(0.1)
    return False


def _stream_with(mutate: Callable[[list[bytes]], list[bytes]]) -> Handler:
    async def h(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
        await send(w, STREAM_HEAD)
        for ev in mutate(ok_events(rid)):
            await send(w, chunk(ev))
        await send(w, LAST_CHUNK)
        return True
    return h


def _insert(at: int, raw: bytes) -> Callable[[list[bytes]], list[bytes]]:
    return lambda evs: evs[:at] + [raw] + evs[at:]


async def m_no_done(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD)
    for ev in ok_events(rid, finish=False, done=False):
        await send(w, chunk(ev))
    await send(w, LAST_CHUNK)
    return True


async def m_http10_close(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, response_head(200, "OK", {"Content-Type": "text/event-stream"}, version="HTTP/1.0"))
    for ev in ok_events(rid):
        await send(w, ev)
        await asyncio.sleep(0.005)
    return False  # the close ends the body


async def m_line_8mb(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    evs = ok_events(rid)
    big = event(_chunk_doc(rid, {"content": "x" * (8 * 1024 * 1024)}))
    await send(w, STREAM_HEAD + chunk(evs[0]))
    for i in range(0, len(big), 256 * 1024):
        await send(w, chunk(big[i:i + 256 * 1024]))
    for ev in evs[1:]:
        await send(w, chunk(ev))
    await send(w, LAST_CHUNK)
    return True


def _queued(w: Writer) -> int:
    """Bytes written but still on this side: asyncio's buffer and the kernel's send queue."""
    queued = w.transport.get_write_buffer_size()
    sock = w.get_extra_info("socket")
    with contextlib.suppress(OSError, ValueError):
        queued += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    return queued


async def _flood(mode: str, r: asyncio.StreamReader, w: Writer, first: bytes, piece: bytes) -> bool:
    """Headers, `first`, then `piece` again and again as fast as the client takes them, until it
    leaves; `_FLOODED[mode]` is then how many bytes left this side (sent and no longer queued)."""
    await send(w, STREAM_HEAD + chunk(first))
    block = chunk(piece * max(1, 65536 // len(piece)))
    end = time.monotonic() + HOLD_S
    _FLOODED[mode] = None  # still flooding
    sent = taken = 0
    try:
        while time.monotonic() < end and not r.at_eof():
            await send(w, block)
            # drain() returns without yielding while the client keeps up: without this one flood
            # would hold every other connection of this server until the client hangs up
            await asyncio.sleep(0)
            sent += len(block)
            taken = max(taken, sent - _queued(w))
    finally:
        _FLOODED[mode] = taken
    return False


async def m_endless_line(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    return await _flood("endless_line", r, w, b"data: ", b"a" * 4096)


async def m_keepalive_flood(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    return await _flood("keepalive_flood", r, w, ok_events(rid)[0], b": keep-alive\n")


async def m_endless_event(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    return await _flood("endless_event", r, w, ok_events(rid)[0], b"data: " + b"e" * 1018 + b"\n")


async def m_not_http(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02 protocol mismatch \xff\xfe\r\n")
    return False


CUT = 300  # what the client keeps of a server's text (client/users.py, dialects/base.py error_text)


def token_across_the_cut(req: Request, offset: int, cut: int = CUT) -> str:
    """A message in which the bearer token starts 10 characters before the cut, counted from
    `offset` (where the message starts in what the client cuts)."""
    token = req.headers.get("authorization", "").partition(" ")[2]
    return "p" * (cut - 10 - offset) + token + " is not valid here"


def _echo_401_at(cut: int) -> Handler:
    async def h(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
        prefix = '{"error": {"message": "'
        body = prefix + token_across_the_cut(req, len(prefix), cut) + '", "type": "authentication_error"}}'
        await send(w, whole(401, "Unauthorized", body.encode(), "application/json"))
        return True
    return h


async def m_echo_stream_error_at_cut(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD + b"".join(chunk(e) for e in ok_events(rid)[:2]))
    await send(w, chunk(event({"error": {"message": token_across_the_cut(req, 0), "type": "authentication_error"}})))
    await send(w, chunk(b"data: [DONE]\n\n") + LAST_CHUNK)
    return True


async def m_echo_401(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    body = json.dumps({"error": {"message": echoed_credentials(req), "type": "authentication_error"}})
    await send(w, whole(401, "Unauthorized", body.encode(), "application/json"))
    return True


async def m_echo_stream_error(req: Request, r: asyncio.StreamReader, w: Writer, rid: str) -> bool:
    await send(w, STREAM_HEAD)
    for ev in ok_events(rid)[:2]:
        await send(w, chunk(ev))
    await send(w, chunk(event({"error": {"message": echoed_credentials(req), "type": "authentication_error"}})))
    await send(w, chunk(b"data: [DONE]\n\n") + LAST_CHUNK)
    return True


HANDLERS: dict[str, Handler] = {
    "ok": m_ok,
    "slow": m_slow,
    "http_429": _status(429, "Too Many Requests", Retry_After="2"),
    "http_500": _status(500, "Internal Server Error"),
    "http_503": _status(503, "Service Unavailable"),
    "json_error_200": m_json_error_200,
    "html_200": m_html_200,
    "reset_mid_stream": m_reset_mid_stream,
    "close_mid_stream": m_close_mid_stream,
    "stall": m_stall,
    "slow_headers": m_slow_headers,
    "malformed_line": _stream_with(_insert(2, b"data: {not json\n\n")),
    "truncated_json": _stream_with(_insert(3, b'data: {"id": "x", "object": "chat.completion.chunk", "choices": [{"ind\n\n')),
    "non_utf8": _stream_with(_insert(2, b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "\xff\xfe\xc3("}}]}\n\n')),
    "no_done": m_no_done,
    "http10_close": m_http10_close,
    "line_8mb": m_line_8mb,
    "endless_line": m_endless_line,
    "keepalive_flood": m_keepalive_flood,
    "endless_event": m_endless_event,
    "error_event": _stream_with(lambda evs: evs[:2] + [event({"error": {"message": "fault server: upstream overloaded",
                                                                         "type": "server_error", "code": 503}})]),
    "not_http": m_not_http,
    "echo_401": m_echo_401,
    "echo_stream_error": m_echo_stream_error,
    "echo_401_at_cut": _echo_401_at(CUT),
    "echo_401_at_cut_200": _echo_401_at(200),
    "echo_stream_error_at_cut": m_echo_stream_error_at_cut,
}
assert set(HANDLERS) == set(MODES) | {"slow"}, set(HANDLERS) ^ set(MODES)


# -- the server ------------------------------------------------------------------------------------------


async def handle(reader: asyncio.StreamReader, writer: Writer) -> None:
    global _READING
    try:
        while True:
            _READING += 1
            try:
                req = await read_request(reader)
            finally:
                _READING -= 1
            if req is None:
                return
            if req.path.startswith("/_faults/seen"):
                await send(writer, whole(200, "OK", json.dumps(dict(_SEEN)).encode(), "application/json"))
                continue
            if req.path.startswith("/_faults/reading"):
                await send(writer, whole(200, "OK", json.dumps(_READING).encode(), "application/json"))
                continue
            if req.path.startswith("/_faults/flooded"):
                await send(writer, whole(200, "OK", json.dumps(_FLOODED).encode(), "application/json"))
                continue
            if req.method == "GET" and req.path.rstrip("/") == "/v1/models":
                _SEEN["models"] += 1
                # every mode is also a model, so a preflight can be sent into one (target.model)
                names = ["fault-model", *(f"FAULT:{m}" for m in HANDLERS)]
                listing = {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
                await send(writer, whole(200, "OK", json.dumps(listing).encode(), "application/json"))
                continue
            if req.method != "POST":
                await send(writer, whole(404, "Not Found", b'{"error": "not found"}', "application/json"))
                continue
            m = MARKER.search(req.body)
            mode = m.group(1).decode() if m else "unmarked"
            _SEEN[mode] += 1
            handler = HANDLERS.get(mode, m_ok)
            rid = f"fault-{mode}-{time.monotonic_ns()}"
            if not await asyncio.wait_for(handler(req, reader, writer, rid), HOLD_S + 5):
                return
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, OSError):
        pass
    finally:
        if not writer.transport.is_closing():
            writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 20, backlog=512)
    print(f"ready on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def _exit_with_stdin() -> None:
    """The test that started us holds our stdin: when it ends, however it ends, so do we."""
    import os
    import threading

    def wait() -> None:
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=wait, daemon=True).start()


if __name__ == "__main__":
    if "--exit-on-stdin-eof" in sys.argv:
        _exit_with_stdin()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
