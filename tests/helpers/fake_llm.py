"""A tiny scripted LLM server (stdlib only: it runs as a script in its own process).

The server speaks every dialect's framing (OpenAI chat/completions SSE, TGI SSE + /generate,
Ollama NDJSON) and misbehaves on request: the behaviour is chosen by the request's model name
(`ok`, `reasoning`, `http-429`, `http-503`, `http-400`, `cut`, `malformed`, `inerror`, `hang`,
`nodone`), so one server covers every error class. Token schedule: `FAKE_TOKENS` tokens,
`FAKE_GAP_S` apart after `FAKE_PREFILL_S`.

Run (from tests/): python -m helpers.fake_llm [PORT [CERT KEY]] — port 0 (the default) binds a free one;
it prints its URL on its first line once it listens (helpers.servers.ServerProcess reads it).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_TOKENS = 5
FAKE_PREFILL_S = 0.02
FAKE_GAP_S = 0.01


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake-model"}]})
        elif self.path == "/seen-auth":
            self._json(200, {"auth": getattr(self.server, "last_auth", None)})
        else:
            self._json(404, {"error": "not found"})

    def _json(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        self.server.last_auth = self.headers.get("Authorization")  # type: ignore[attr-defined]
        path = self.path
        if path.startswith("/generate"):
            mode = req.get("parameters", {}).get("mode", "ok")
            mode = os.environ.get("FAKE_TGI_MODE", mode)
        else:
            mode = req.get("model", "ok")
        if mode.startswith("http-"):
            status = int(mode[5:])
            self._json(status, {"error": {"message": f"scripted {status}"}})
            return
        stream = req.get("stream", path == "/generate_stream")
        if path.startswith("/api/"):
            stream = req.get("stream", True)
        ntok = FAKE_TOKENS
        rid = f"fake-{time.monotonic_ns()}"
        if not stream:
            time.sleep(FAKE_PREFILL_S + FAKE_GAP_S * (ntok - 1))
            self._json(200, self._full(path, rid, ntok))
            return
        self.send_response(200)
        ctype = "application/x-ndjson" if path.startswith("/api/") else "text/event-stream"
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if mode == "hang":
            time.sleep(30)
            return
        time.sleep(FAKE_PREFILL_S)
        events = self._events(path, rid, ntok, mode, req)
        for i, ev in enumerate(events):
            if i and ev is not None:
                time.sleep(FAKE_GAP_S)
            if ev is None:  # cut: close the socket mid-stream without the terminating chunk
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self._chunk(ev)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _full(self, path: str, rid: str, ntok: int) -> dict:
        text = "tok " * ntok
        if path == "/v1/chat/completions":
            return {"id": rid, "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": ntok}}
        if path == "/v1/completions":
            return {"id": rid, "choices": [{"text": text, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": ntok}}
        if path == "/generate":
            return {"generated_text": text, "details": {"generated_tokens": ntok, "finish_reason": "length"}}
        if path == "/api/chat":
            return {"message": {"role": "assistant", "content": text}, "done": True, "eval_count": ntok, "prompt_eval_count": 7}
        return {"response": text, "done": True, "eval_count": ntok, "prompt_eval_count": 7}

    def _events(self, path: str, rid: str, ntok: int, mode: str, req: dict) -> list[bytes | None]:
        out: list[bytes | None] = []
        sse = not path.startswith("/api/")

        def emit(doc: object) -> None:
            raw = json.dumps(doc).encode()
            out.append(b"data: " + raw + b"\n\n" if sse else raw + b"\n")

        if path == "/v1/chat/completions":
            emit({"id": rid, "choices": [{"delta": {"role": "assistant", "content": ""}}]})
            for i in range(ntok):
                delta = {"reasoning_content": "hm "} if mode == "reasoning" and i < 2 else {"content": f"t{i} "}
                emit({"id": rid, "choices": [{"delta": delta, "finish_reason": "length" if i == ntok - 1 else None}]})
        elif path == "/v1/completions":
            for i in range(ntok):
                emit({"id": rid, "choices": [{"text": f"t{i} ", "finish_reason": "length" if i == ntok - 1 else None}]})
        elif path == "/generate_stream":
            for i in range(ntok):
                last = i == ntok - 1
                emit({"index": i, "token": {"id": i, "text": f"t{i} ", "special": False},
                      "generated_text": ("x" if last else None),
                      "details": ({"generated_tokens": ntok, "finish_reason": "length"} if last else None)})
        elif path == "/api/chat":
            for i in range(ntok):
                emit({"message": {"role": "assistant", "content": f"t{i} "}, "done": False})
            emit({"message": {"role": "assistant", "content": ""}, "done": True, "eval_count": ntok, "prompt_eval_count": 7})
        else:
            for i in range(ntok):
                emit({"response": f"t{i} ", "done": False})
            emit({"response": "", "done": True, "eval_count": ntok, "prompt_eval_count": 7})
        if path.startswith("/v1/") and mode != "nodone":
            if req.get("stream_options", {}).get("include_usage"):
                emit({"id": rid, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": ntok}})
            out.append(b"data: [DONE]\n\n")
        if mode == "cut":
            out = out[:3] + [None]
        elif mode == "malformed":
            out.insert(2, b"data: {not json\n\n" if sse else b"{not json\n")
        elif mode == "inerror":
            out = out[:2] + [b'data: {"error": {"message": "scripted in-stream failure"}}\n\n' if sse
                             else b'{"error": "scripted in-stream failure"}\n']
        elif mode == "nodone":
            out = [o for o in out if o is None or b"finish_reason\": \"length" not in o]
        return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (timeouts, cancelled tests) are expected here


def serve(port: int = 0, cert: str | None = None, key: str | None = None) -> None:
    srv = _Server(("127.0.0.1", port), Handler)
    scheme = "http"
    if cert and key:
        import ssl

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
        scheme = "https"
    print(f"{READY_PREFIX}{scheme}://127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


READY_PREFIX = "ready on "

if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0, *(sys.argv[2:4]))
