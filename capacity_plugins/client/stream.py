"""Reading a response body as it arrives: one timestamp per receive, bounded, never stuck.

How each event is timed: every complete line already buffered is handled in one pass with one
timestamp — when the receive that brought them got its data, taken before anything is parsed.
On plain TCP on Linux that is the kernel's own arrival stamp (SO_TIMESTAMPNS, read with
recvmsg): a generator busy with other streams reads later, but its stamps do not move, so TTFT
and ITL stay exact up to the load that saturates it. Elsewhere (TLS, other systems) it is the
moment the receive returned. Lines that came in one read share its stamp (they did arrive
together), and the per-chunk work is per block: dialects/fastpath.py recognises the chunk
envelope a response repeats (vLLM, SGLang, OpenAI) and parses fully only what is not that
envelope. It works on geventhttpclient's response buffer, with readline() as the fallback should
that internal layout ever change; this and every other touch of geventhttpclient's, gevent's and
libev's internals goes through capacity_plugins/host.py, which says why each is needed. Bytes
that came in the headers' read (geventhttpclient's) carry the moment this reader started.

What a hostile or broken server cannot do to the generator:

- **Hang it with a line that never ends.** A line (an SSE event, an NDJSON document) longer than
  `max_line_bytes` (16 MiB by default) ends the request as `malformed`. Only new bytes are
  searched for a newline, so a long line costs linear time, not quadratic.
- **Keep it from the hub.** A server that streams faster than it is read always has data
  waiting, so a receive never blocks and the greenlet never yields: no gevent timeout fires, no
  signal is handled, no other user runs. Every reader here gives the hub a full loop turn once
  it has read for `YIELD_NS` without the hub running (`_HubShare`), and checks the request's
  deadline itself.
- **Make it buffer a whole body in memory.** A non-streamed body larger than `max_body_bytes`
  ends as `malformed` after reading that much.
"""

from __future__ import annotations

import contextlib
import os
import platform
import select
import socket
import struct
import sys
from time import perf_counter_ns, time_ns
from typing import Any

import gevent
import gevent.socket
from gevent.hub import Waiter
from gevent.monkey import get_original
from geventhttpclient.response import HTTPConnectionClosed

from capacity_plugins import host
from capacity_plugins.contracts.records import Timings
from capacity_plugins.dialects import OUTPUT, MalformedEvent
from capacity_plugins.dialects.base import Parser
from capacity_plugins.dialects.fastpath import BodyEvents, stamp
from capacity_plugins.dialects.framing import NDJSONDecoder, SSEDecoder

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# A body being read yields to the hub after this long without the hub having run (a fast stream
# never blocks on its own).
YIELD_NS = 1_000_000
# The longest such a yield waits for the loop to have nothing else to do.
IDLE_WAIT_S = 0.002
# A body being read lets waiting first tokens be read after this long (`yield_to_first_reads`):
# one epoll_wait(0) per 0.1 ms of reading at most. With 8 streams of 29 tokens per 1 ms step, a
# turn of eight blocks took most of a step: checks every 0.2 / 0.05 ms cut first tokens read a
# step late from 2.3 % to 0.9 / 0.7 % (A/B, 4 rounds), with no ingest cost either way.
FIRST_READ_CHECK_NS = 100_000
# Bytes asked of one receive: a reader that fell behind takes what waits in one go (one stamp:
# those chunks did wait), a reader that keeps up gets what one write sent.
RECV_BYTES = 256 * 1024
# SO_TIMESTAMPNS (= its control message type): 35 on Linux x86-64 / arm64; elsewhere not used.
_SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", None) or (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64", "arm64") else None)
# The real poll (Locust's monkey-patching replaces select.poll with gevent's, which yields).
_poll: Any = get_original("select", "poll") if hasattr(select, "poll") else None
# The real epoll (gevent's patching removes it from `select`); None off Linux.
_epoll: Any = get_original("select", "epoll") if sys.platform == "linux" else None
_TIMESPEC = struct.Struct("@ll")  # struct timespec: native longs
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 64


# libev's highest watcher priority (EV_MAXPRI): libev runs pending watchers by priority, so a
# connection waiting for its first token is read before the streams mid-body that the same poll
# found readable, and before everything else when its event is fed mid-turn
# (`yield_to_first_reads`). gevent on libuv has no priorities and ignores it.
_FIRST_READ_PRIORITY = 2


class _FirstReads:
    """The connections of this process that sent a request and have not read its first body
    bytes yet, in a real epoll set: `due()` says, in one syscall, whether any has data waiting;
    meanwhile their read watchers run first in every loop turn (`_FIRST_READ_PRIORITY`).

    Why: the kernel stamps a receive with the arrival of the *last* write it returns (TCP merges
    writes queued in a socket), so a first token read after the server's next write is stamped
    one decode step late — TTFT inflated by a whole step (docs/metrics.md). In a closed loop the
    streams of one batch end in the same decode step, and each user's completion (its record,
    then its next request's build and send: ~0.3 ms of the core, HTTP client included) ran
    before any first token of the requests sent just before: with 8 streams, 30 % of first
    tokens were read a step late at 40 % of the core. A user about to send asks `due()` first
    and, when a first token waits, lets the hub run (`yield_to_first_reads`): the read costs the
    send a few µs, the stamp stays the first write's. Forked workers get their own set."""

    __slots__ = ("_poller", "_fds", "_sent_by", "checked_ns", "feeding")

    def __init__(self) -> None:
        self._poller: Any = None
        self.checked_ns = 0  # perf_counter_ns of the last `yield_to_first_reads`
        self.feeding = False  # a user waits for the readers it fed (yield_to_first_reads)
        self._fds: dict[int, Any] = {}  # fd → its socket (whose watcher's priority is raised)
        # the user (greenlet) that sent on each connection: an attempt whose answer never reaches
        # read_stream (not streamed, an error status, a timeout) ends the wait it began
        self._sent_by: dict[Any, int] = {}

    def reset(self) -> None:  # a forked child: the parent's epoll instance is not its own
        self._poller, self._fds, self._sent_by, self.checked_ns, self.feeding = None, {}, {}, 0, False

    def watch(self, sock: Any) -> None:
        fd = sock.fileno()
        if _epoll is None or fd < 0 or fd in self._fds:  # not Linux; closed; a request's next block
            return
        try:
            if self._poller is None:
                self._poller = _epoll()
            self._poller.register(fd, select.EPOLLIN)
        except (OSError, ValueError):  # a closed fd, out of descriptors: nothing to watch
            return
        self._fds[fd] = sock
        self._sent_by[gevent.getcurrent()] = fd
        host.set_read_priority(sock, _FIRST_READ_PRIORITY)

    def done(self, fd: int) -> None:
        """`fd` has read its first bytes, or gave up (once or more: the later calls do nothing)."""
        sock = self._fds.pop(fd, None)
        if sock is not None:
            host.set_read_priority(sock, 0)
            with contextlib.suppress(OSError, ValueError):  # closed already: the kernel dropped it
                self._poller.unregister(fd)

    def over(self) -> None:
        """The calling user's attempt is over: the connection it sent on waits for nothing."""
        self.done(self._sent_by.pop(gevent.getcurrent(), -1))

    def due(self) -> bool:
        return bool(self._fds) and bool(self._poller.poll(0, 1))  # one event says enough

    def ready(self) -> list[int]:
        """The watched connections with data waiting (one cheap syscall when none has)."""
        if not self.due():
            return []
        return [fd for fd, _ in self._poller.poll(0, len(self._fds))]


FIRST_READS = _FirstReads()
os.register_at_fork(after_in_child=FIRST_READS.reset)


def yield_to_first_reads(now: int = 0, in_body: bool = False) -> None:
    """Before a send, before making a record, and every FIRST_READ_CHECK_NS of reading a body
    (`in_body`): the users whose first body bytes wait read them now, then this user goes on.

    Now, not at the end of the loop turn: a turn runs every callback that was pending when it
    polled, and in a closed loop a whole batch of users finishing in the same decode step is
    one turn — 160 completions of ~0.3 ms held first tokens that arrived meanwhile for 20 ms,
    two decode steps, however often a user yielded (`gevent.idle()` waits for the turn's end;
    watcher priorities order only what one poll found). libev takes events fed in mid-turn and
    runs the highest priority first: the waiting readers' events are fed (`host.feed_reads`;
    their watchers run at _FIRST_READ_PRIORITY), then this user's own resumption one level below
    them (`host.feed_callback`), above everyone else's reads.

    A fed reader does not feed in turn: against a fast server it reads its whole answer, sends
    the next request and would feed another — fed, each user fed the next and one turn ran for
    two seconds (no timer, no other connection in between). So feeding is the work of users the
    poll woke, and each feeds only first reads: a turn grows by at most their first blocks. A
    fed reader (and any user on libuv) waits one loop turn before a send instead, bounded like
    `_HubShare`'s; a body read goes on."""
    FIRST_READS.checked_ns = now or perf_counter_ns()
    ready = FIRST_READS.ready()
    if not ready:
        return
    loop = gevent.get_hub().loop
    if not FIRST_READS.feeding and host.is_libev(loop):
        host.feed_reads(loop, ready)  # the readers waiting on them run first, as if polled
        waiter = Waiter()
        host.feed_callback(loop, _FIRST_READ_PRIORITY - 1, waiter.switch)  # then this user
        FIRST_READS.feeding = True
        try:
            waiter.get()
        finally:
            FIRST_READS.feeding = False
        return
    if not in_body:
        _rest_of_turn()


def _rest_of_turn() -> None:
    """Wait for the loop's turn to end (`gevent.idle()`), at most IDLE_WAIT_S: a loop busy with
    thousands of other streams may never be idle."""
    with gevent.Timeout(IDLE_WAIT_S, False):
        gevent.idle()


class RequestTimeout(Exception):
    """The whole-request deadline (--request-timeout) passed."""


class _HubShare:
    """Lets the hub run after `YIELD_NS` of reading during which it did not.

    Whether it ran is read from the loop's turn counter (libev's `iteration`): a receive that
    waited for data went through the hub, one that found data waiting did not — however long its
    copy took (a time threshold mistook a 256 KB copy for a wait and never yielded: a flood of
    keep-alive lines then held every other user for the whole request timeout). The yield is
    `gevent.idle()`, a whole loop turn: `sleep(0)` runs ready callbacks only, so users waiting on
    a socket or a timer could still wait tens of milliseconds; a positive sleep waits for the
    loop's timer resolution (~1 ms with epoll) even when nothing else needs the core, halving a
    fast reader. A loop without the counter (libuv) yields every `YIELD_NS` of reading."""

    __slots__ = ("_loop", "_turn", "_since")

    def __init__(self) -> None:
        self._loop = gevent.get_hub().loop
        self._turn = host.loop_turn(self._loop)
        self._since = perf_counter_ns()

    def share(self, now: int) -> None:
        turn = host.loop_turn(self._loop)
        if turn is not None and turn != self._turn:  # the hub ran meanwhile
            self._turn, self._since = turn, now
        elif now - self._since >= YIELD_NS:
            _rest_of_turn()  # timers, signals and the other users run
            self._since = perf_counter_ns()
            self._turn = host.loop_turn(self._loop)


def _event_at(data: bytes | None, parser: Parser, t: Timings, now: int) -> None:
    if data is None or parser.error is not None:
        return
    what = parser.event(data)
    if what >= OUTPUT:
        stamp(t, parser, what, now)


def read_stream(resp: Any, parser: Parser, t: Timings, *, deadline_ns: int,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
    """Read a streamed body into `parser`, stamping output events on `t`. Raises MalformedEvent,
    RequestTimeout, HTTPConnectionClosed / OSError (the caller classifies)."""
    buf = host.take_body(resp)  # from now on every piece of the body lands here, appended in C
    if buf is None:
        decoder = SSEDecoder() if parser.framing == "sse" else NDJSONDecoder()
        _read_by_lines(resp, parser, t, decoder, deadline_ns, max_line_bytes)
        return
    events = BodyEvents(parser, t, max_line_bytes)
    block_size = max(getattr(resp, "block_size", 0), RECV_BYTES)
    sock = _stamping(resp)
    wall_offset = time_ns() - perf_counter_ns()  # kernel stamps (CLOCK_REALTIME) → perf_counter_ns
    now = perf_counter_ns()
    # Body bytes that came in the headers' read: its kernel stamp on a connection stamped since
    # its previous response, else now (they arrived by then).
    stamp = now
    if sock is not None and sock.arrived:
        stamp = max(t.sent_ns, min(now, sock.arrived - wall_offset))
    first_fd = sock.fileno() if sock is not None else -1
    # Read first because another user fed this one its first bytes (yield_to_first_reads): the
    # rest of the body waits for the loop's next turn, as it would have.
    fed = False
    if buf:  # the first body bytes came with the headers: read already
        FIRST_READS.done(first_fd)
        first_fd = -1
        fed = FIRST_READS.feeding
    scanned = 0  # bytes at the front of buf already known to hold no newline
    hub = _HubShare()
    while True:
        cut = buf.rfind(b"\n", scanned)
        if cut >= 0:
            if cut + 1 == len(buf):  # the usual case: every byte received so far is whole lines
                block = bytes(buf)
                buf.clear()
            else:
                block = bytes(buf[: cut + 1])
                del buf[: cut + 1]
            scanned = 0
            if events.block(block, stamp):
                t.end_ns = perf_counter_ns()
                return
            continue
        scanned = len(buf)
        if scanned > max_line_bytes:
            raise MalformedEvent(f"over {max_line_bytes} bytes without a line end: not an event stream")
        if resp.message_complete:
            break
        now = perf_counter_ns()  # after the parse: its time counts towards the deadline and the yield
        if now >= deadline_ns:
            raise RequestTimeout
        if fed:
            fed = False
            _rest_of_turn()
        elif now - FIRST_READS.checked_ns >= FIRST_READ_CHECK_NS:
            yield_to_first_reads(now, in_body=True)
        hub.share(now)
        current = host.response_socket(resp)
        if current is None:
            raise HTTPConnectionClosed("connection closed mid-body")
        try:
            data = current.recv(block_size)
            now = perf_counter_ns()
            if first_fd >= 0:
                FIRST_READS.done(first_fd)
                first_fd = -1
                fed = FIRST_READS.feeding
            arrived = getattr(current, "arrived", 0)
            # stamps never go back (the headers' read may have had none)
            stamp = max(stamp, min(now, arrived - wall_offset)) if arrived else now
            resp.feed(data)
        except BaseException:
            resp.release()
            raise
        if not data and not resp.message_complete:
            raise HTTPConnectionClosed("connection closed mid-body")
    rest = bytes(buf)  # a last line without "\n"
    del buf[:]
    events.finish(rest, perf_counter_ns())
    t.end_ns = perf_counter_ns()


class _StampedSocket(gevent.socket.socket):
    """A connection that keeps the kernel's arrival stamp of what each receive returned
    (`arrived`: CLOCK_REALTIME ns of the last segment read; 0 when the kernel gave none) — for
    this reader's receives and for geventhttpclient's read of the next response's headers, which
    often brings the first token along."""

    __slots__ = ("arrived",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived = 0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.recvmsg(bufsize, _ANCILLARY_BYTES, flags)
        arrived = 0
        for _, kind, value in ancillary:
            if kind == _SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(value)
                arrived = sec * 1_000_000_000 + nsec
        self.arrived = arrived
        return data

    def sendall(self, data: Any, flags: int = 0) -> None:
        super().sendall(data, flags)
        FIRST_READS.watch(self)  # a request went out: its answer's first bytes are due

    def close(self) -> None:
        FIRST_READS.done(self.fileno())
        super().close()


def _stamped_tcp_socket(family: int, socktype: int, protocol: int) -> Any:
    sock = _StampedSocket(family, socktype, protocol)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    return sock


def _idle_and_open(sock: Any) -> bool:
    """Whether a pooled keep-alive connection can carry the next request: it has nothing to read
    (something to read on an idle connection is the server's close, or bytes nobody asked for).

    geventhttpclient asks the same with a zero-timeout gevent select, which also yields to the
    hub: after the request's send stamp, so every other user's reads ran between the stamp and
    the send (1.5 ms at the median, 7 ms at p99 with 8 busy streams, added to every TTFT). This
    asks the kernel directly (poll: no descriptor limit) and never yields."""
    try:
        fd = sock.fileno()
        if fd < 0:
            return False
        poller = _poll()
        poller.register(fd, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False


def _prepare_pool(pool: Any) -> None:
    """This geventhttpclient ConnectionPool (on this instance only): new connections are
    _StampedSockets from the start (its documented TCP socket factory), and a pooled connection
    is checked without yielding (`_idle_and_open`)."""
    host.override_pool(pool, is_socket_alive=_idle_and_open if _poll is not None else None,
                       create_tcp_socket=_stamped_tcp_socket if _SO_TIMESTAMPNS is not None else None)


def prepare_connections(client_pool: Any) -> None:
    """Every connection pool `client_pool` (a geventhttpclient HTTPClientPool, LLMUser's `_pool`)
    hands out from now on is prepared by `_prepare_pool`: its connections are _StampedSockets from
    their first response (the read of the response headers — which may bring the first token —
    gets the kernel's stamp too; without this a connection becomes one when read_stream first
    meets it, i.e. from its second response on), and reusing one never yields between the
    request's send stamp and its send."""
    get_client = client_pool.get_client

    def prepared_get_client(url: Any) -> Any:
        client = get_client(url)
        _prepare_pool(host.connection_pool(client))
        return client

    client_pool.get_client = prepared_get_client


def _stamping(resp: Any) -> _StampedSocket | None:
    """The response's connection, as a _StampedSocket from now on (Linux, plain TCP): the kernel
    then stamps when data reaches it, so a busy generator's own delays never enter a stamp. The
    same file descriptor in a subclass of gevent's socket; the pool gets it back when the
    response is released. None where it cannot: TLS (the stamp would be the encrypted record's,
    SSL sockets have no recvmsg), other systems, a connection already gone."""
    sock = host.response_socket(resp)
    if type(sock) is _StampedSocket:
        return sock
    _prepare_pool(host.response_pool(resp))  # this user's next connections, from their first response
    if _SO_TIMESTAMPNS is None or sock is None or type(sock) is not gevent.socket.socket:
        return None
    try:
        timeout = sock.gettimeout()
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        stamped = _StampedSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        stamped.settimeout(timeout)
    except (OSError, ValueError, AttributeError):
        return None
    host.replace_response_socket(resp, stamped)
    return stamped


def _read_by_lines(resp: Any, parser: Parser, t: Timings, decoder: SSEDecoder | NDJSONDecoder,
                   deadline_ns: int, max_line_bytes: int) -> None:
    """The portable path: geventhttpclient's readline (bounded by its own line limit)."""
    hub = _HubShare()
    first = True
    while True:
        now = perf_counter_ns()
        if now >= deadline_ns:
            raise RequestTimeout
        if now - FIRST_READS.checked_ns >= FIRST_READ_CHECK_NS:
            yield_to_first_reads(now, in_body=True)
        hub.share(now)
        line = resp.readline(b"\n")
        if first:  # its first bytes are read: no longer a first read due (once, not per line)
            FIRST_READS.over()
            first = False
        if not line:
            line = resp.read(max_line_bytes + 1)  # the message is complete; a last line without "\n"
            if not line:
                break
        if len(line) > max_line_bytes:
            raise MalformedEvent(f"a line of over {max_line_bytes} bytes: not an event stream")
        _event_at(decoder.feed(line), parser, t, perf_counter_ns())
        if parser.error is not None:
            break
    if parser.error is None:
        _event_at(decoder.flush(), parser, t, perf_counter_ns())
    t.end_ns = perf_counter_ns()


def read_body(resp: Any, *, deadline_ns: int, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """A whole non-streamed body, bounded in size and time."""
    parts: list[bytes] = []
    size = 0
    hub = _HubShare()
    while True:
        now = perf_counter_ns()
        if now >= deadline_ns:
            raise RequestTimeout
        hub.share(now)
        chunk = resp.read(65536)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_body_bytes:
            raise MalformedEvent(f"a response body of over {max_body_bytes} bytes")
        parts.append(chunk)
