"""A small HTTP/1.1 server on asyncio.Protocol: keep-alive, Content-Length bodies, chunked streams.

Why by hand: it must stream ≥ 20 000 tokens/s on one core, one write syscall per event, with
the time each write was issued known exactly (the truth log). A framework would add buffering and
per-chunk overhead we could not see. One request at a time per connection (no pipelining
overlap): bytes of a next request are buffered until the current response ends.

A request's `arrival` is stamped when its body has been fully read; a write's time is stamped just
before the write call, so a client can never read the bytes earlier than their stamp (a stamp
taken after the call returned would also count any time the process was descheduled in between,
which on a loaded machine put it milliseconds after the client had already read the token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import Any

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
           413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "arrival")

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes, arrival: float) -> None:
        self.method = method
        self.path, _, self.query = target.partition("?")
        self.headers = headers
        self.body = body
        self.arrival = arrival


class Responder:
    """How a handler answers: `send` a whole response, or `start` + `chunk`… + `end` a stream."""

    __slots__ = ("_proto", "_transport", "_keep_alive", "done", "extra_headers")

    def __init__(self, proto: HttpProtocol, keep_alive: bool) -> None:
        self._proto = proto
        self._transport = proto.transport
        self._keep_alive = keep_alive
        self.done = False
        self.extra_headers = ""

    def set_on_lost(self, callback: Callable[[], None]) -> None:
        """Called if the client closes the connection before this response ends."""
        self._proto.on_lost = callback

    @property
    def closed(self) -> bool:
        return self._transport.is_closing()

    def _head(self, status: int, content_type: str, length: int | None) -> str:
        head = f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\ncontent-type: {content_type}\r\n"
        head += f"content-length: {length}\r\n" if length is not None else "transfer-encoding: chunked\r\n"
        head += self.extra_headers
        head += "connection: keep-alive\r\n\r\n" if self._keep_alive else "connection: close\r\n\r\n"
        return head

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> float:
        """Write a complete response; returns the time the write was issued."""
        if self.done:
            return perf_counter()
        data = self._head(status, content_type, len(body)).encode() + body
        t = perf_counter()
        self._transport.write(data)
        self._finish()
        return t

    def start(self, status: int, content_type: str, first: bytes = b"") -> float:
        data = self._head(status, content_type, None).encode()
        if first:
            data += b"%x\r\n%b\r\n" % (len(first), first)
        t = perf_counter()
        self._transport.write(data)
        return t

    def chunk(self, data: bytes) -> float:
        """One chunk, one write; returns the time the write was issued."""
        data = b"%x\r\n%b\r\n" % (len(data), data)
        t = perf_counter()
        self._transport.write(data)
        return t

    def end(self, events: list[bytes] | tuple[bytes, ...] = ()) -> float:
        """Write the final events (one chunk and one write each) and the terminating chunk."""
        if self.done:
            return perf_counter()
        for event in events[:-1]:
            self._transport.write(b"%x\r\n%b\r\n" % (len(event), event))
        last = events[-1] if events else b""
        data = b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last) if last else b"0\r\n\r\n"
        t = perf_counter()
        self._transport.write(data)
        self._finish()
        return t

    def abort(self) -> None:
        """Cut the connection (fault injection): the client sees the stream end without its terminator."""
        self.done = True
        self._transport.abort()

    def _finish(self) -> None:
        self.done = True
        if self._keep_alive:
            self._proto.response_done()
        else:
            self._transport.close()


Handler = Callable[[Request, Responder], Any]


class HttpProtocol(asyncio.Protocol):
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buf = bytearray()
        self.busy = False
        self.continued = False
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        cb, self.on_lost = self.on_lost, None
        if cb is not None:
            cb()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._parse()

    def response_done(self) -> None:
        self.busy = False
        self.on_lost = None
        if self.buf:
            asyncio.get_running_loop().call_soon(self._parse)

    def _error(self, status: int, message: str) -> None:
        body = b'{"object":"error","message":"%s","type":"BadRequestError","param":null,"code":%d}' % (
            message.encode(), status)
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%b" % (status, REASONS[status].encode(), len(body), body))
        self.transport.close()
        self.buf.clear()
        self.busy = True

    def _parse(self) -> None:
        if self.busy or self.transport.is_closing():
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self._error(431, "request head too large")
            return
        try:
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        except ValueError:
            self._error(400, "malformed HTTP request head")
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._error(411, "chunked request bodies are not supported; send Content-Length")
            return
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self._error(400, "bad Content-Length")
            return
        if length < 0 or length > MAX_BODY:
            self._error(413, "request body too large")
            return
        if len(self.buf) < end + 4 + length:
            # curl and others wait (1 s) for this before sending a body over 1 KiB.
            if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        self.continued = False
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        arrival = perf_counter()
        conn = headers.get("connection", "").lower()
        keep_alive = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        self.busy = True
        self.handler(Request(method, target, headers, body, arrival), Responder(self, keep_alive))
