"""A bare-socket HTTP/1.1 client that stamps each response chunk as it arrives.

For the simulator's own tests and benchmark: no client library between the socket and the
timestamp, so a difference from the truth log is the simulator's, not a client's buffering.
Works under gevent's monkey-patching too (tests import Locust first).
"""

from __future__ import annotations

import contextlib
import socket
from time import perf_counter
from typing import Any

import orjson


class Response:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[tuple[float, bytes]] = []  # (perf_counter when fully received, payload)
        self.body = b""
        self.sent = 0.0  # perf_counter when the request's last byte was handed to the kernel
        self.complete = False  # the body ended properly (last chunk / full length)

    def json(self) -> Any:
        return orjson.loads(self.body)

    def sse_events(self) -> list[bytes]:
        """`data:` payloads, in order, from the whole body."""
        out = []
        for line in self.body.split(b"\n"):
            if line.startswith(b"data:"):
                out.append(line[5:].strip())
        return out


class Connection:
    """One keep-alive connection; `request` may be called repeatedly."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def _read_until(self, sep: bytes) -> bytes | None:
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + len(sep):]
                return out
            if not self._fill():
                return None

    def _read_exact(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> Response:
        payload = raw if raw is not None else (orjson.dumps(body) if body is not None else b"")
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: {len(payload)}\r\n"
        if payload:
            head += "content-type: application/json\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        resp = Response()
        self.sock.sendall(head.encode() + b"\r\n" + payload)
        resp.sent = perf_counter()
        with contextlib.suppress(OSError):  # a cut connection: `complete` stays False
            self._read_response(resp)
        return resp

    def _read_response(self, resp: Response) -> None:
        head = self._read_until(b"\r\n\r\n")
        if head is None:
            return
        lines = head.decode("latin-1").split("\r\n")
        resp.status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            resp.headers[k.strip().lower()] = v.strip()
        if "content-length" in resp.headers:
            body = self._read_exact(int(resp.headers["content-length"]))
            if body is not None:
                resp.body = body
                resp.chunks.append((perf_counter(), body))
                resp.complete = True
            return
        parts = []
        while True:
            size_line = self._read_until(b"\r\n")
            if size_line is None:
                break
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self._read_until(b"\r\n")
                resp.complete = True
                break
            data = self._read_exact(size + 2)
            if data is None:
                break
            resp.chunks.append((perf_counter(), data[:-2]))
            parts.append(data[:-2])
        resp.body = b"".join(parts)


def request(port: int, method: str, path: str, body: Any = None, **kw: Any) -> Response:
    with Connection(port) as conn:
        return conn.request(method, path, body, **kw)
