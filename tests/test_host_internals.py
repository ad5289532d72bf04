"""gevent, libev and geventhttpclient still have every shape host.py relies on, and nothing
else in the package touches their internals: these fail when a library changes underneath.

Each test names the host function whose assumption it checks; when one fails after an upgrade,
that function (and only it) needs a new way in. The behaviour built on them is tested where it
is used (tests/test_users.py: stamped connections, first reads; tests/test_gil_share.py: the
idle gate).
"""

from __future__ import annotations

import ast
import socket
from typing import Any

import gevent
import gevent.socket
import pytest
from gevent.hub import Waiter
from geventhttpclient.client import HTTPClient, HTTPClientPool
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse
from geventhttpclient.url import URL
from helpers.paths import ROOT

from capacity_plugins import host
from capacity_plugins.client import stream

PACKAGE = ROOT / "capacity_plugins"


@pytest.fixture
def listener():
    server = socket.socket()  # gevent's: Locust patched the module (conftest.py)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


# --- gevent's loop ------------------------------------------------------------------------------


def test_the_hub_runs_libev_with_the_priorities_stream_uses():
    # is_libev: without libev every feature below falls back, silently slower or later
    loop = gevent.get_hub().loop
    assert host.is_libev(loop), type(loop)
    assert stream._FIRST_READ_PRIORITY == loop.MAXPRI  # libev's EV_MAXPRI
    assert loop.MINPRI < 0 < loop.MAXPRI


def test_the_loop_counts_its_turns():
    # loop_turn: libev's `iteration`
    loop = gevent.get_hub().loop
    before = host.loop_turn(loop)
    assert isinstance(before, int)
    gevent.idle()  # a whole loop turn
    assert host.loop_turn(loop) > before


def test_fed_readers_run_without_data_and_before_a_fed_callback_of_lower_priority():
    # feed_reads: libev's closing_fd feeds the fd's active watchers (whether readable or not);
    # feed_callback: a never-started check watcher's `feed` runs its callback once, by priority
    loop = gevent.get_hub().loop
    a, b = socket.socketpair()
    order: list[str] = []
    watcher = loop.io(a.fileno(), 1)  # a read watcher, as a waiting receive has
    try:
        watcher.priority = loop.MAXPRI
        watcher.start(lambda *_: order.append("reader"))
        waiter = Waiter()
        host.feed_reads(loop, [a.fileno()])  # nothing to read: only the feed can wake it
        host.feed_callback(loop, loop.MAXPRI - 1, lambda value: (order.append("callback"), waiter.switch(value)))
        waiter.get()
        assert order == ["reader", "callback"]
        gevent.idle()
        assert order == ["reader", "callback"]  # each ran once: a feed is not a start
    finally:
        watcher.close()
        a.close()
        b.close()


def test_the_loop_says_what_is_pending_and_queued():
    # HubIdleGate (_nothing_queued): libev's `pendingcnt`, gevent's private `_callbacks`, and a
    # prepare watcher at MINPRI that does not keep the loop alive
    loop = gevent.get_hub().loop
    assert isinstance(loop.pendingcnt, int)
    queued = len(loop._callbacks)
    callback = loop.run_callback(lambda: None)
    try:
        assert len(loop._callbacks) == queued + 1
        assert not host._nothing_queued(loop)
    finally:
        callback.stop()
    prepare = loop.prepare(ref=False, priority=loop.MINPRI)
    try:
        assert prepare.priority == loop.MINPRI and not prepare.ref
    finally:
        prepare.close()


# --- gevent's socket ----------------------------------------------------------------------------


def test_a_sockets_reads_wait_on_its_read_event_whose_priority_can_be_set():
    # set_read_priority: gevent's private `_read_event`
    a, b = socket.socketpair()
    try:
        assert isinstance(a, gevent.socket.socket)
        event = a._read_event
        assert event.fd == a.fileno() and event.events & 1  # the watcher a receive waits on (READ)
        host.set_read_priority(a, 2)
        assert a._read_event.priority == 2
        host.set_read_priority(a, 0)
        assert a._read_event.priority == 0
    finally:
        a.close()
        b.close()
    host.set_read_priority(a, 2)  # closed: nothing to set, and no error


# --- geventhttpclient ---------------------------------------------------------------------------


def test_a_clients_pool_is_reached_and_its_two_hooks_are_overridden_on_the_instance(listener):
    # connection_pool: an HTTPClient's `_connection_pool`, as HTTPClientPool.get_client builds it;
    # override_pool: a ConnectionPool creates connections with `_create_tcp_socket` and checks a
    # pooled one with `_is_socket_alive` (TLS pools too)
    port = listener.getsockname()[1]
    client = HTTPClientPool().get_client(URL(f"http://127.0.0.1:{port}/"))
    assert isinstance(client, HTTPClient)
    pool = host.connection_pool(client)
    assert isinstance(pool, ConnectionPool)
    assert issubclass(SSLConnectionPool, ConnectionPool)
    made: list[tuple[int, int, int]] = []
    checked: list[Any] = []

    def create_tcp_socket(family: int, socktype: int, protocol: int) -> Any:
        made.append((family, socktype, protocol))
        return gevent.socket.socket(family, socktype, protocol)

    def is_socket_alive(sock: Any) -> bool:
        checked.append(sock)
        return True

    host.override_pool(pool, is_socket_alive=is_socket_alive, create_tcp_socket=create_tcp_socket)
    host.override_pool(pool, is_socket_alive=is_socket_alive, create_tcp_socket=create_tcp_socket)  # idempotent
    sock = pool.get_socket()
    try:
        assert [m[:2] for m in made] == [(socket.AF_INET, socket.SOCK_STREAM)]
        pool.return_socket(sock)
        assert pool.get_socket() is sock  # the pooled connection, checked by the override
        assert checked == [sock]
    finally:
        pool.release_socket(sock)
        client.close()
    # the class, and so every other pool, keeps geventhttpclient's own
    other = host.connection_pool(HTTPClient("127.0.0.1", port))
    assert "_is_socket_alive" not in vars(other) and "_create_tcp_socket" not in vars(other)
    assert vars(ConnectionPool)["_create_tcp_socket"] is not create_tcp_socket


def test_a_responses_body_socket_and_pool(listener):
    # take_body: `_body_buffer` and the C parser's `_on_body`, looked up on the instance;
    # response_socket / replace_response_socket / response_pool: `_sock` and `_pool`; the
    # connection a complete response gives back to its pool is its `_sock` at that moment
    port = listener.getsockname()[1]
    pool = ConnectionPool("127.0.0.1", port, "127.0.0.1", port)
    sock = pool.get_socket()
    server, _ = listener.accept()
    try:
        server.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        resp = HTTPSocketPoolResponse(sock, pool)  # reads the headers and what came with them
        assert host.response_socket(resp) is sock and host.response_pool(resp) is pool
        same = gevent.socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        host.replace_response_socket(resp, same)  # as stream.py `_stamping` does
        assert host.response_socket(resp) is same
        buf = host.take_body(resp)
        assert isinstance(buf, bytearray) and bytes(buf) == b"hello"
        assert resp._on_body == buf.extend
        pieces: list[bytes] = []
        resp._on_body = lambda piece: pieces.append(bytes(piece))  # the parser calls the instance's
        server.sendall(b"6\r\n world\r\n")
        resp.feed(host.response_socket(resp).recv(resp.block_size))
        assert pieces == [b" world"] and not resp.message_complete
        resp._on_body = buf.extend
        server.sendall(b"1\r\n!\r\n0\r\n\r\n")
        resp.feed(host.response_socket(resp).recv(resp.block_size))
        assert bytes(buf) == b"hello!" and resp.message_complete
        # complete: the response released its connection (kept alive) to the pool
        assert host.response_socket(resp) is None and host.response_pool(resp) is None
        assert pool.get_socket() is same
        pool.release_socket(same)
    finally:
        server.close()
    assert host.take_body(object()) is None  # another layout: the caller reads by readline()


# --- nowhere else -------------------------------------------------------------------------------

# The internals host.py reaches, by name: touched anywhere else (on anything but `self`),
# the test below fails.
HOST_INTERNALS = {"_body_buffer", "_on_body", "_sock", "_pool", "_connection_pool", "_is_socket_alive",
                  "_create_tcp_socket", "_read_event", "_callbacks", "closing_fd", "iteration",
                  "pendingcnt", "MINPRI", "MAXPRI"}
# The places allowed to reach into a library: this host module, and Locust's (tests/test_locust_compat.py).
ALLOWED_FILES = {"host.py", "swarm/locust_compat.py"}
# Private names of the standard library that are its public way, and why:
STDLIB_PRIVATE = {
    "_replace",  # namedtuple's documented method (underscored so no field can clash)
    "_create_unverified_context",  # ssl: PEP 476's documented opt-out, for --insecure only
}


def _own_names(trees: list[ast.Module]) -> set[str]:
    """Names the package itself defines: functions, classes, module names, `self.` attributes
    and slots (a private name of its own read on another of its objects is no library's)."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
                        elif isinstance(sub, ast.Attribute) and _on_self(sub):
                            names.add(sub.attr)
                if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets) and node.value:
                    names |= {c.value for c in ast.walk(node.value)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


def _on_self(node: ast.Attribute) -> bool:
    value = node.value
    return ((isinstance(value, ast.Name) and value.id in ("self", "cls"))
            or (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"))


def _reached(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of every attribute reached on something other than `self`: `x.name`, and
    `getattr` / `hasattr` / `setattr` / `delattr(x, "name")`."""
    found = []
    for node in ast.walk(tree):  # (sorted below: the walk goes breadth first)
        if isinstance(node, ast.Attribute) and not _on_self(node):
            found.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            found.append((node.lineno, node.args[1].value))
    return sorted(found)


def _package() -> dict[str, ast.Module]:
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(), str(p)) for p in PACKAGE.rglob("*.py")}


def _private_touches(trees: dict[str, ast.Module]) -> list[str]:
    own = _own_names(list(trees.values()))
    touches = []
    for rel, tree in sorted(trees.items()):
        if rel in ALLOWED_FILES:
            continue
        for line, name in _reached(tree):
            private = name.startswith("_") and not name.startswith("__")
            if name in HOST_INTERNALS or (private and name not in own and name not in STDLIB_PRIVATE):
                touches.append(f"capacity_plugins/{rel}:{line}: .{name}")
    return touches


def test_no_module_but_host_touches_a_librarys_internals():
    assert _private_touches(_package()) == [], "go through host.py (and say why there)"


def test_the_checker_sees_an_internal_touched():
    # the negative control: what stream.py did before host.py (`_pool` is also a name of
    # the package's own, on self), a libev method, and a private name of no module of the package
    trees = _package()
    trees["client/stream.py"] = ast.parse(
        "def f(resp, loop):\n    getattr(resp, '_pool')\n    loop.closing_fd(3)\n    return resp._some_private\n")
    assert _private_touches(trees) == ["capacity_plugins/client/stream.py:2: ._pool",
                                       "capacity_plugins/client/stream.py:3: .closing_fd",
                                       "capacity_plugins/client/stream.py:4: ._some_private"]
