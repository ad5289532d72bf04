"""LLMUser against the scripted fake server, in-process (one Environment, its own Events)."""

import os
from pathlib import Path
from typing import Any

import gevent
import orjson
import pytest
from helpers.fake_llm import FAKE_TOKENS
from helpers.ports import free_port
from helpers.users import local_user


def make(url, tmp_path: Path, **opts):
    options = dict(model="ok", max_tokens=16, timeout_s=10.0, retries=0, headers=[], api_key_env="",
                   insecure=False, sampling="shuffle", seed=0)
    u = local_user(url, tmp_path, sampler="shuffle", corpus_size=50, **{**options, **opts})
    return u.env, u, u.user, u.fired


def lines(u):
    u.records.close()
    return [orjson.loads(x) for x in (u.results_dir / "requests.jsonl").read_bytes().splitlines()]


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions", "tgi", "ollama", "ollama-generate"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_dialect_streaming_and_not(fake_llm, tmp_path, dialect, stream):
    env, u, user, fired = make(fake_llm, tmp_path, dialect=dialect, model="ok", stream=stream)
    rec = user.call(u.next_sample())
    assert rec.ok, rec.error
    assert rec.output_tokens == FAKE_TOKENS
    assert rec.output_tokens_source == "usage"
    if stream:
        assert rec.ttft_ms is not None and 0 < rec.ttft_ms <= rec.e2e_ms
        assert len(rec.itl_ms) == FAKE_TOKENS - 1 and rec.tpot_ms is not None
    else:
        assert rec.ttft_ms is None and rec.itl_ms == []
    # exactly one Locust request event per call: E2E as response_time, tokens as length
    assert len(fired) == 1 and fired[0]["exception"] is None
    assert fired[0]["response_time"] == rec.e2e_ms and fired[0]["response_length"] == FAKE_TOKENS
    assert lines(u)[0]["request_id"] == rec.request_id


def test_reasoning_counts_for_ttft_and_content_for_first_visible(fake_llm, tmp_path):
    env, u, user, fired = make(fake_llm, tmp_path, model="reasoning")
    rec = user.call(u.next_sample())
    assert rec.ok and rec.first_visible_ms > rec.ttft_ms
    assert rec.output_tokens == FAKE_TOKENS and len(rec.itl_ms) == FAKE_TOKENS - 1


@pytest.mark.parametrize(
    ("model", "kind", "status"),
    [
        ("http-429", "http_429", 429),
        ("http-503", "http_5xx", 503),
        ("http-400", "http_4xx", 400),
        ("cut", "stream_cut", 200),
        ("nodone", "stream_cut", 200),
        ("malformed", "malformed", 200),
        ("inerror", "server_error", 200),
    ],
)
def test_error_classes_are_records_and_locust_failures(fake_llm, tmp_path, model, kind, status):
    env, u, user, fired = make(fake_llm, tmp_path, model=model)
    rec = user.call(u.next_sample())
    assert (rec.ok, rec.error_kind, rec.status) == (False, kind, status)
    assert len(fired) == 1 and fired[0]["exception"] is not None and kind in str(fired[0]["exception"])
    # the user keeps working after a failure (same connection pool)
    rec2 = user.call(u.next_sample())
    assert rec2.error_kind == kind
    assert [d["error_kind"] for d in lines(u)] == [kind, kind]


def test_timeout_and_connect_refused(fake_llm, tmp_path):
    env, u, user, fired = make(fake_llm, tmp_path, model="hang", timeout_s=0.5)
    rec = user.call(u.next_sample())
    assert rec.error_kind == "timeout" and rec.e2e_ms >= 450
    env2, u2, user2, fired2 = make(f"http://127.0.0.1:{free_port()}", tmp_path / "b")
    rec = user2.call(u2.next_sample())
    assert (rec.error_kind, rec.status) == ("connect", 0) and fired2[0]["exception"] is not None


def test_cancelled_mid_stream_is_recorded(fake_llm, tmp_path):
    env, u, user, fired = make(fake_llm, tmp_path, model="hang")
    g = gevent.spawn(user.call, u.next_sample())
    gevent.sleep(0.3)
    g.kill(block=True)
    assert [d["error_kind"] for d in lines(u)] == ["cancelled"]
    # stopped by the test, not failed by the server: no Locust failure (a timed run exits 0)
    assert fired == []


def test_retries_record_every_attempt(fake_llm, tmp_path):
    env, u, user, fired = make(fake_llm, tmp_path, model="http-503", retries=2)
    rec = user.call(u.next_sample())
    assert rec.attempt == 3
    got = lines(u)
    assert [d["attempt"] for d in got] == [1, 2, 3] and all(d["error_kind"] == "http_5xx" for d in got)
    assert len({d["prompt_id"] for d in got}) == 1 and len(fired) == 3
    env, u, user, fired = make(fake_llm, tmp_path / "b", model="http-400", retries=2)
    assert user.call(u.next_sample()).attempt == 1  # 4xx is not retryable


def test_api_key_sent_but_never_written(fake_llm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-very-secret-123")
    env, u, user, fired = make(
        fake_llm, tmp_path, api_key_env="FAKE_LLM_KEY", headers=["X-Api-Key: hdr-secret-456", "X-Team: blue"]
    )
    assert "sk-very-secret-123" not in repr(u.llm) and "sk-very-secret-123" not in repr(u.source)
    user.call(u.next_sample())
    import urllib.request

    seen = orjson.loads(urllib.request.urlopen(fake_llm + "/seen-auth").read())
    assert seen["auth"] == "Bearer sk-very-secret-123"
    env.events.quitting.fire(environment=env)
    for f in (tmp_path / "out").iterdir():  # text and binary (requests.arrow) alike
        data = f.read_bytes()
        assert b"sk-very-secret-123" not in data and b"hdr-secret-456" not in data, f.name
    meta = orjson.loads((tmp_path / "out" / "meta.json").read_bytes())
    assert meta["extra_headers"] == {"X-Api-Key": "<redacted>", "X-Team": "blue"}
    assert meta["records"]["written"] == 1 and meta["records"]["lost"] == 0
    assert meta["server"].get("models") == ["fake-model"]


def test_tls_verified_unless_insecure(fake_llm_tls, tmp_path):
    # a self-signed certificate: refused by default (FastHttpUser alone would accept it) ...
    env, u, user, fired = make(fake_llm_tls, tmp_path)
    rec = user.call(u.next_sample())
    assert (rec.ok, rec.error_kind) == (False, "connect") and "TLS" in rec.error
    # ... and accepted only with the explicit --insecure opt-in
    env, u, user, fired = make(fake_llm_tls, tmp_path / "b", insecure=True)
    rec = user.call(u.next_sample())
    assert rec.ok, rec.error


def test_missing_api_key_env_and_unknown_dialect_are_user_errors(fake_llm, tmp_path):
    from capacity_plugins.errors import UserError

    os.environ.pop("NOPE_KEY_XYZ", None)
    with pytest.raises(UserError, match="NOPE_KEY_XYZ"):
        make(fake_llm, tmp_path, api_key_env="NOPE_KEY_XYZ")
    with pytest.raises(UserError, match="unknown dialect"):
        make(fake_llm, tmp_path, dialect="grpc-magic")


def test_seams_pacer_timeline_record_event_and_meta_event(fake_llm, tmp_path):
    import time

    from capacity_plugins.rehearsal.steps import Step

    env, u, user, fired = make(fake_llm, tmp_path)

    class Pacer:
        def __init__(self):
            self.calls = 0

        def wait_arrival(self):
            self.calls += 1
            if self.calls == 1:
                return None  # no arrival now: the user idles and asks again
            return time.time() - 0.050, None  # due 50 ms ago; the corpus decides what to send

        def release(self):
            self.released = True  # the user's request is done: it holds no arrival any more

    u.source.pacer = Pacer()
    now = time.time()  # in step 3's warmup (the rehearsal keeps the timeline; here the test does)
    u.source.timeline.upsert(Step(index=3, kind="rate", level=1.0, start_unix=now - 1, warmup_end_unix=now + 60,
                                  end_unix=now + 120))
    seen = []
    events = env.capacity_events
    events.record.add_listener(lambda record: 1 / 0)  # a broken listener must not lose the record
    events.record.add_listener(lambda record: seen.append(record))

    def learn(meta):  # what meta.json learns: a field of the document (contracts/meta.py)
        meta.scenario = "unit"

    events.writing_meta.add_listener(learn)
    user.llm_request()  # pacer says "nothing now": no request
    assert fired == []
    user.llm_request()
    assert len(seen) == 1 and len(fired) == 1
    r = seen[0]
    assert (r.step, r.warmup) == (3, True)
    assert r.scheduled_unix is not None and r.sent_unix - r.scheduled_unix >= 0.049
    assert r.ttft_from_schedule_ms >= r.ttft_ms + 49 and r.e2e_from_schedule_ms >= r.e2e_ms + 49
    env.events.quitting.fire(environment=env)
    meta = orjson.loads((tmp_path / "out" / "meta.json").read_bytes())
    assert meta["scenario"] == "unit"
    assert lines(u)[0]["step"] == 3
    assert u.source.pacer.released


def test_reset_stats_clears_llm_stats(fake_llm, tmp_path):
    env, u, user, fired = make(fake_llm, tmp_path)
    user.call(u.next_sample())
    assert u.llm.stats.rows()[0]["requests"] == 1
    env.events.reset_stats.fire()
    assert all(r["requests"] == 0 for r in u.llm.stats.rows())


def test_a_users_connections_are_kernel_stamped_from_their_first_response(fake_llm, tmp_path):
    from geventhttpclient.url import URL

    from capacity_plugins.client import stream

    env, u, user, fired = make(fake_llm, tmp_path)
    # before any response: the pool the user's first request will use already makes stamped
    # sockets, so the read of that response's headers (which may carry the first token) is stamped
    pool = user._pool.get_client(URL(fake_llm))._connection_pool
    assert vars(pool).get("_create_tcp_socket") is stream._stamped_tcp_socket
    rec = user.call(u.next_sample())
    assert rec.error_kind is None and rec.ttft_ms is not None


def test_reusing_a_pooled_connection_does_not_yield_after_the_send_stamp(fake_llm, tmp_path):
    """The request's send stamp is taken before the pool hands over a connection: a yield to the
    hub there (geventhttpclient's own check is a gevent select, which yields) lets every other
    user's reads run first and adds their time to this request's TTFT."""
    from geventhttpclient.url import URL

    env, u, user, fired = make(fake_llm, tmp_path)
    assert user.call(u.next_sample()).error_kind is None  # one keep-alive connection in the pool
    pool = user._pool.get_client(URL(fake_llm))._connection_pool
    idle = list(pool._socket_queue.queue)
    assert len(idle) == 1
    others_ran: list[int] = []
    gevent.spawn(others_ran.append, 1)  # runs at the first yield to the hub
    sock = pool.get_socket()
    assert not others_ran, "getting a pooled connection yielded to the hub"
    assert sock is idle[0]  # the idle connection was reused, not replaced
    pool.return_socket(sock)


def test_a_pooled_connection_with_something_to_read_is_not_reused():
    """An idle keep-alive connection has nothing to read: bytes waiting are the server's close or
    data nobody asked for, and the connection must not carry the next request."""
    import socket

    from capacity_plugins.client.stream import _idle_and_open

    a, b = socket.socketpair()
    try:
        assert _idle_and_open(a)
        b.sendall(b"stray")
        assert not _idle_and_open(a)
        a.recv(16)
        b.close()  # the server's close: a FIN to read
        assert not _idle_and_open(a)
    finally:
        a.close()
    assert not _idle_and_open(a)  # closed here


def _connected_pair():
    """A kernel-stamped client connection (as a user's pool makes them) and the server's end."""
    import socket

    from capacity_plugins.client.stream import _stamped_tcp_socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = _stamped_tcp_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def test_a_first_token_waiting_is_read_before_another_user_sends():
    """The kernel stamps a read with the last write it returns: a first token read after the
    server's next write is stamped a decode step late. A user about to send lets a connection
    whose first bytes wait read them first — and does not yield when none wait (a yield puts
    every other user's reads between its send stamp and its send)."""
    from capacity_plugins.client.stream import FIRST_READS, yield_to_first_reads

    client, server = _connected_pair()
    fd = client.fileno()
    try:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # a request went out: its answer is due
        server.recv(64)
        read: list[bytes] = []

        def reader() -> None:  # as read_stream does
            read.append(client.recv(64))
            FIRST_READS.done(fd)

        gevent.spawn(reader)
        gevent.sleep(0)  # the reader now waits on the hub for its first bytes
        others_ran: list[int] = []
        gevent.spawn(others_ran.append, 1)  # runs at this greenlet's first yield
        assert not FIRST_READS.due()
        yield_to_first_reads()
        assert not others_ran and not read
        server.sendall(b"data: first\n\n")  # loopback: in the client's socket on return
        assert FIRST_READS.due()
        yield_to_first_reads()
        assert read == [b"data: first\n\n"]
        assert not FIRST_READS.due()
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # the next request on the connection
    finally:
        client.close()  # closed while waiting: no longer watched
        server.close()
    assert fd not in FIRST_READS._fds


def test_a_loop_turn_reads_connections_waiting_for_a_first_token_first():
    """When one loop turn finds many connections readable (hundreds of streams get their tokens
    in the same decode step), the ones waiting for a first token are read before the streams
    mid-body: a first token read after the server's next write is stamped a step late, a
    mid-body token only as late as the loop was. And a connection back to mid-body is an
    ordinary one again."""
    from capacity_plugins.client.stream import FIRST_READS

    pairs = [_connected_pair() for _ in range(7)]
    first, first_server = pairs[3]
    order: list[int] = []
    try:
        first.sendall(b"GET / HTTP/1.1\r\n\r\n")  # a request went out: its first bytes are due
        first_server.recv(64)

        def reader(i: int, sock: Any) -> None:  # as read_stream does
            sock.recv(64)
            FIRST_READS.done(sock.fileno())
            order.append(i)

        readers = [gevent.spawn(reader, i, client) for i, (client, _) in enumerate(pairs)]
        gevent.sleep(0)  # every reader now waits on the hub
        for _, server in pairs:  # all readable before the hub polls again
            server.sendall(b"data: x\n\n")
        gevent.joinall(readers, raise_error=True)
        assert order[0] == 3, order
        assert first._read_event.priority == 0
    finally:
        for client, server in pairs:
            client.close()
            server.close()


def test_a_first_token_arriving_mid_turn_is_read_before_the_rest_of_the_turn():
    """A batch of users finishing in the same decode step is one loop turn: every one of them
    runs before the loop polls again, so a first token arriving meanwhile waited for all of
    them — 20 ms, two decode steps, with 160 streams. A user that yields to first reads lets
    the waiting reader run now, and goes on before the others of its turn."""
    from capacity_plugins.client.stream import FIRST_READS, yield_to_first_reads

    first, first_server = _connected_pair()
    pairs = [_connected_pair() for _ in range(5)]
    order: list[str] = []
    try:
        first.sendall(b"GET / HTTP/1.1\r\n\r\n")
        first_server.recv(64)

        def first_reader() -> None:
            first.recv(64)
            FIRST_READS.done(first.fileno())
            order.append("first read")

        def finishing(i: int, sock: Any) -> None:  # a user whose last token came in this turn
            sock.recv(64)
            order.append(f"start {i}")
            if len(order) == 1:  # the first of the turn: the first token arrives meanwhile
                first_server.sendall(b"data: first\n\n")
            yield_to_first_reads()
            order.append(f"end {i}")

        greenlets = [gevent.spawn(first_reader)] + [gevent.spawn(finishing, i, c) for i, (c, _) in enumerate(pairs)]
        gevent.sleep(0)  # all wait on the hub
        for _, server in pairs:  # one poll finds all of them
            server.sendall(b"data: [DONE]\n\n")
        gevent.joinall(greenlets, raise_error=True)
        began = order[0].split()[1]
        assert order[:3] == [f"start {began}", "first read", f"end {began}"], order
        assert len(order) == 11
    finally:
        first.close()
        first_server.close()
        for client, server in pairs:
            client.close()
            server.close()


def _burst_answer(tokens: int) -> bytes:
    events = [b'data: {"id":"burst","choices":[{"delta":{"content":"t%d "},"finish_reason":%s}]}\n\n'
              % (i, b'"length"' if i == tokens - 1 else b"null") for i in range(tokens)]
    events += [b'data: {"id":"burst","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % tokens,
               b"data: [DONE]\n\n"]
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n")


def _burst_server(tokens: int, held: list[Any] | None = None) -> Any:
    """A server that writes a whole streamed chat answer at once: its reader finds data in
    every receive and never waits on the hub. With `held`, it answers nothing: the test writes
    the answer itself on the connection it finds there."""
    from gevent.server import StreamServer

    answer = _burst_answer(tokens)

    def handle(sock: Any, _address: Any) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += sock.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), b"0"))
        while len(body) < length:
            body += sock.recv(65536)
        if held is not None and head.startswith(b"POST"):
            held.append(sock)
        else:
            sock.sendall(answer)
        sock.recv(1)  # until the client hangs up

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def test_a_user_reading_a_long_body_lets_a_waiting_first_token_be_read(tmp_path, monkeypatch):
    """A reader whose data keeps arriving never waits on the hub, so nothing else runs until it
    yields (_HubShare: after 1 ms): a first token arriving meanwhile, on another connection, was
    read after the server's next write and stamped a step late. The reader lets it be read within
    FIRST_READ_CHECK_NS (here 0: at its next receive)."""
    from capacity_plugins.client import stream
    from capacity_plugins.dialects import fastpath

    monkeypatch.setattr(stream, "FIRST_READ_CHECK_NS", 0)
    monkeypatch.setattr(stream, "YIELD_NS", 10**12)  # the hub share never yields here
    monkeypatch.setattr(stream, "RECV_BYTES", 1024)  # many receives, each finding data
    server = _burst_server(400)
    env, u, user, fired = make(f"http://127.0.0.1:{server.server_port}", tmp_path, max_tokens=400)
    waiting, waiting_server = _connected_pair()
    order: list[str] = []
    block = fastpath.BodyEvents.block

    def counted_block(self: Any, data: bytes, now: int) -> bool:
        order.append("block")
        if order.count("block") == 1:  # the first token arrives on the other connection
            waiting_server.sendall(b"data: first\n\n")
        return block(self, data, now)

    def first_reader() -> None:
        waiting.recv(64)
        stream.FIRST_READS.done(waiting.fileno())
        order.append("first read")

    try:
        waiting.sendall(b"GET / HTTP/1.1\r\n\r\n")
        waiting_server.recv(64)
        reader = gevent.spawn(first_reader)
        gevent.sleep(0)
        monkeypatch.setattr(fastpath.BodyEvents, "block", counted_block)
        rec = user.call(u.next_sample())
        reader.join(timeout=5)
        assert rec.ok and rec.output_tokens == 400, rec.error
        assert order.count("block") > 5  # the body came in many receives
        assert order.index("first read") == 1, order
    finally:
        waiting.close()
        waiting_server.close()
        server.stop()


def test_a_reader_fed_its_first_bytes_reads_the_rest_in_a_later_turn(tmp_path, monkeypatch):
    """A user yielding to first reads runs their readers now; one whose whole answer is there
    would read all of it — and a whole closed loop of such users could feed each other and keep
    the loop from polling (timers, other connections) for seconds. After its first block, a fed
    reader lets the user that fed it go on."""
    from capacity_plugins.client import stream
    from capacity_plugins.dialects import fastpath

    monkeypatch.setattr(stream, "RECV_BYTES", 1024)  # the answer in many receives
    held: list[Any] = []
    server = _burst_server(200, held)
    env, u, user, fired = make(f"http://127.0.0.1:{server.server_port}", tmp_path, max_tokens=200)
    order: list[str] = []
    block = fastpath.BodyEvents.block

    def counted_block(self: Any, data: bytes, now: int) -> bool:
        order.append("block")
        return block(self, data, now)

    def feeder() -> None:  # a user the poll woke, about to send: the answer arrives meanwhile
        held[0].sendall(_burst_answer(200))
        stream.yield_to_first_reads()
        order.append("feeder goes on")

    try:
        monkeypatch.setattr(fastpath.BodyEvents, "block", counted_block)
        call = gevent.spawn(user.call, u.next_sample())
        while not held:
            gevent.sleep(0.01)
        gevent.sleep(0.05)  # the user waits for its answer's first bytes
        gevent.spawn(feeder).join()
        rec = call.get(timeout=5)
        assert rec.ok and rec.output_tokens == 200, rec.error
        assert order.count("block") > 2
        assert order.index("feeder goes on") == 1, order
    finally:
        server.stop()


def test_a_reader_fed_its_first_bytes_does_not_feed_others():
    """Feeding is the work of users the poll woke: a fed reader that reaches a yield (its answer
    complete, its next send) waits for the turn's end instead of feeding another — else each
    fed user fed the next and the turn never ended."""
    from capacity_plugins.client.stream import FIRST_READS, yield_to_first_reads

    fed, fed_server = _connected_pair()
    other, other_server = _connected_pair()
    woken, woken_server = _connected_pair()
    order: list[str] = []
    try:
        for client, server in ((fed, fed_server), (other, other_server)):
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # both wait for their first bytes
            server.recv(64)

        def fed_reader() -> None:
            fed.recv(64)
            FIRST_READS.done(fed.fileno())
            order.append("fed read")
            other_server.sendall(b"data: first\n\n")  # another first token arrives meanwhile
            yield_to_first_reads()  # its answer was whole: before its next send
            order.append("fed goes on")

        def other_reader() -> None:
            other.recv(64)
            FIRST_READS.done(other.fileno())
            order.append("other read")

        def woken_user() -> None:  # woken by the poll: feeds the first read it finds waiting
            woken.recv(64)
            fed_server.sendall(b"data: first\n\n")
            yield_to_first_reads()
            order.append("woken goes on")

        greenlets = [gevent.spawn(fed_reader), gevent.spawn(other_reader), gevent.spawn(woken_user)]
        gevent.sleep(0)
        woken_server.sendall(b"data: [DONE]\n\n")
        gevent.joinall(greenlets, raise_error=True)
        assert order[:3] == ["fed read", "woken goes on", "other read"], order
    finally:
        for sock in (fed, fed_server, other, other_server, woken, woken_server):
            sock.close()


def test_the_portable_line_reader_measures_the_same_and_ends_the_first_read(fake_llm, tmp_path, monkeypatch):
    """Should geventhttpclient's buffer ever change shape, the body is read line by line through
    its readline: the same record, and the connection stops counting as a first read due once
    its first line is in (else every other user's send would yield to it for the whole body)."""
    from capacity_plugins import host
    from capacity_plugins.client import stream

    monkeypatch.setattr(host, "bytearray", type("NotTheBuffer", (), {}), raising=False)
    due_meanwhile: list[bool] = []
    event_at = stream._event_at

    def watched_event_at(data: Any, parser: Any, t: Any, now: int) -> None:
        due_meanwhile.append(bool(stream.FIRST_READS._fds))
        event_at(data, parser, t, now)

    monkeypatch.setattr(stream, "_event_at", watched_event_at)
    env, u, user, fired = make(fake_llm, tmp_path)
    rec = user.call(u.next_sample())
    assert rec.ok, rec.error
    assert rec.output_tokens == FAKE_TOKENS and len(rec.itl_ms) == FAKE_TOKENS - 1
    assert rec.ttft_ms is not None and 0 < rec.ttft_ms <= rec.e2e_ms
    assert len(due_meanwhile) > FAKE_TOKENS and not any(due_meanwhile)


@pytest.mark.parametrize(("model", "stream"), [("ok", True), ("ok", False), ("http-503", True), ("cut", True),
                                            ("malformed", True)])
def test_no_connection_is_left_waiting_for_a_first_read(fake_llm, tmp_path, model, stream):
    """Every attempt ends its connection's wait, however it ended: one left watched would have
    data (the server's close) one day, and every send after would yield for nothing."""
    from capacity_plugins.client.stream import FIRST_READS

    env, u, user, fired = make(fake_llm, tmp_path, model=model, stream=stream)
    for _ in range(3):
        user.call(u.next_sample())
    assert not FIRST_READS._fds


def test_a_forked_worker_does_not_share_the_parents_first_reads():
    """Locust's --processes forks its workers: an epoll set inherited from the parent is the same
    kernel object, so a child would see the parent's connections as its own first reads."""
    from capacity_plugins.client.stream import FIRST_READS

    client, server = _connected_pair()
    try:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        server.sendall(b"data: first\n\n")  # the parent's first read is due
        assert FIRST_READS.due()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: what it sees, then out without pytest's teardown
            os.close(read)
            os.write(write, b"due" if FIRST_READS.due() else b"not due")
            os._exit(0)
        os.close(write)
        seen = os.read(read, 64)
        os.close(read)
        os.waitpid(pid, 0)
        assert seen == b"not due"
        assert FIRST_READS.due()  # the parent's own set is untouched
    finally:
        client.close()
        server.close()
