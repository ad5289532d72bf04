"""Client ingest rate: streamed chunks/s one LLMUser process reads, vs a bare-socket reader.

A separate server process answers every POST with a pre-rendered chunked SSE body (vLLM chat
framing, EVENTS token chunks + usage + [DONE]) written in large sendall()s, so it is never the
bottleneck. Two clients read the same stream, each in its own process, one after the other:

- bare: a raw socket; split lines; json.loads every `data:` payload (the baseline in issue 3).
- llmuser: capacity_plugins' LLMUser.call() (readline per line, SSE framing, orjson, per-chunk
  perf_counter_ns stamps, record build, LLMStats + Locust request event + records sink).

Printed: chunks/s for each, their ratio, and the TTFT the client adds at that load (the server
writes the first chunk as soon as it has read the request, so TTFT ≈ client + loopback cost).
Figures only; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVENTS = 5000
SECONDS = float(os.environ.get("BENCH_CLIENT_SECONDS", "3"))

CHUNK = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}\n\n'
)
ROLE = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
)
TAIL = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n'
    % (EVENTS, EVENTS + 5)
)


def _render() -> tuple[bytes, bytes]:
    """Headers + first event, then the rest. Content-Length framing so the bare reader needs no
    chunked decoder; the LLMUser reads it through the same readline path as a chunked stream."""
    first = ROLE + CHUNK
    rest = CHUNK * (EVENTS - 1) + TAIL
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % (
        len(first) + len(rest)
    )
    return head + first, rest


def serve(port: int) -> None:
    import threading

    first, rest = _render()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)

    def handle(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                conn.sendall(first)
                conn.sendall(rest)
        except OSError:
            return
        finally:
            conn.close()

    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def bare_reader(port: int) -> dict[str, float]:
    """Raw socket + json.loads of every event (the baseline)."""
    body = b'{"model":"m","stream":true}'
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    events = 0
    start = time.perf_counter()
    buf = b""
    while time.perf_counter() - start < SECONDS:
        s.sendall(req)
        while b"\r\n\r\n" not in buf:
            buf += s.recv(262144)
        head, _, buf = buf.partition(b"\r\n\r\n")
        remaining = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        done = False
        while not done:
            if b"\n" not in buf:
                data = s.recv(262144)
                if not data:
                    raise RuntimeError("server closed")
                buf += data
                continue
            lines = buf.split(b"\n")
            buf = lines.pop()
            for line in lines:
                remaining -= len(line) + 1
                if line.startswith(b"data: "):
                    payload = line[6:]
                    if payload == b"[DONE]":
                        done = True
                        continue
                    json.loads(payload)
                    events += 1
        # skip the rest of this body (the blank line after [DONE])
        while remaining > 0:
            if not buf:
                buf = s.recv(262144)
            take = min(remaining, len(buf))
            buf = buf[take:]
            remaining -= take
    elapsed = time.perf_counter() - start
    return {"chunks_per_s": events / elapsed, "events": events}


def llmuser_reader(port: int) -> dict[str, float]:
    import locust  # noqa: F401, I001  (monkey-patches first)
    import argparse

    from locust.env import Environment
    from locust.event import Events

    from capacity_plugins.load import plugin
    from capacity_plugins.load.users import LLMUser

    tmp = Path(tempfile.mkdtemp(prefix="bench_client_"))
    corpus = tmp / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q {i}"}) + "\n" for i in range(100)))
    url = f"http://127.0.0.1:{port}"
    ns = argparse.Namespace(dialect="openai-chat", model="m", corpus=str(corpus), min_distinct=1,
                            max_tokens=EVENTS, results_dir=str(tmp / "out"))
    user_class = type("BenchUser", (LLMUser,), {"host": url})
    env = Environment(user_classes=[user_class], events=Events(), host=url, parsed_options=ns)
    env.create_local_runner()
    ctx = plugin.register(env)
    ctx.sampler = ctx.corpus.sampler("random", 0, 0, 1)
    user = user_class(env)
    events = 0
    ttfts: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        rec = user.call(ctx.next_sample())
        if not rec.ok:
            raise RuntimeError(f"bench request failed: {rec.error_kind} {rec.error}")
        events += len(rec.itl_ms) + 1
        ttfts.append(rec.ttft_ms or 0.0)
    elapsed = time.perf_counter() - start
    ctx.sink.close()
    ttfts.sort()
    return {
        "chunks_per_s": events / elapsed,
        "events": events,
        "ttft_p50_ms": ttfts[len(ttfts) // 2],
        "ttft_max_ms": ttfts[-1],
        "requests": len(ttfts),
    }


def _child(kind: str, port: int) -> None:
    result = bare_reader(port) if kind == "bare" else llmuser_reader(port)
    print("RESULT " + json.dumps(result), flush=True)


def _run_child(kind: str, port: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(port)], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"{kind} reader failed: {out.stderr[-2000:]}")


def main() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        bare = _run_child("bare", port)
        user = _run_child("llmuser", port)
    finally:
        server.kill()
        server.wait()
    ratio = user["chunks_per_s"] / bare["chunks_per_s"]
    print(f"stream: {EVENTS} chunks/request, {len(CHUNK)} B/chunk, {SECONDS:g} s per reader, one process each")
    print(f"bare socket + json.loads : {bare['chunks_per_s']:>10,.0f} chunks/s")
    print(f"LLMUser (full record path): {user['chunks_per_s']:>10,.0f} chunks/s   ratio {ratio:.2f} x bare")
    print(f"client-added TTFT at that load (server writes chunk 1 at once): p50 {user['ttft_p50_ms']:.3f} ms, "
          f"max {user['ttft_max_ms']:.3f} ms over {user['requests']:.0f} requests")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
