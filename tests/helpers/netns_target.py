"""The target of the network-namespace tests: an OpenAI-compatible streaming server that counts,
per client address, the requests it answered and the ones it saw start.

Each host of helpers/netns.py has its own address, so what the server answered per address is
what each worker (or the master's preflight) was answered: the tests compare it with the records.
The response id names the address (`ans-<ip>-<n>`), so a record says whose answer it holds.

`GET /answered` → {ip: {"started": n, "answered": n, "ids": [response ids answered],
"last_start_unix": t}}. A request counts as answered once its last byte (`[DONE]`) was written.

Run (from tests/): python -m helpers.netns_target BIND_HOST [TOKENS GAP_S]; prints `ready on URL`.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from typing import Any

from helpers.fake_llm import Handler as FakeLLMHandler
from helpers.fake_llm import _Server

TOKENS = 8
GAP_S = 0.05

_lock = threading.Lock()
_seen: dict[str, dict[str, Any]] = {}
_ids = itertools.count()


def _entry(ip: str) -> dict[str, Any]:
    return _seen.setdefault(ip, {"started": 0, "answered": 0, "ids": [], "last_start_unix": None})


class Handler(FakeLLMHandler):
    """fake_llm's framing (`_json`, `_chunk`), its own answers: one model, counted per address."""

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "ns-model"}]})
        elif self.path == "/answered":
            with _lock:
                self._json(200, _seen)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        ip = self.client_address[0]
        with _lock:
            e = _entry(ip)
            e["started"] += 1
            e["last_start_unix"] = time.time()
            rid = f"ans-{ip}-{next(_ids)}"
        ntok = min(int(req.get("max_tokens") or TOKENS), TOKENS)
        if not req.get("stream"):
            time.sleep(GAP_S * ntok)
            self._json(200, {"id": rid, "choices": [{"message": {"role": "assistant", "content": "tok " * ntok},
                                                     "finish_reason": "length"}],
                             "usage": {"prompt_tokens": 7, "completion_tokens": ntok}})
            self._answered(ip, rid)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(ntok):
            time.sleep(GAP_S)
            doc = {"id": rid, "choices": [{"delta": {"content": f"t{i} "},
                                           "finish_reason": "length" if i == ntok - 1 else None}]}
            self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")
        if (req.get("stream_options") or {}).get("include_usage"):
            doc = {"id": rid, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": ntok}}
            self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self._answered(ip, rid)

    @staticmethod
    def _answered(ip: str, rid: str) -> None:
        with _lock:
            e = _entry(ip)
            e["answered"] += 1
            e["ids"].append(rid)


def serve(host: str, tokens: int = TOKENS, gap_s: float = GAP_S) -> None:
    global TOKENS, GAP_S
    TOKENS, GAP_S = tokens, gap_s
    srv = _Server((host, 0), Handler)
    print(f"ready on http://{host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1], *(int(sys.argv[2]),) if len(sys.argv) > 2 else (), *(float(sys.argv[3]),) if len(sys.argv) > 3 else ())
