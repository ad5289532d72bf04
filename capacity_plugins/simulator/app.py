"""Routes requests to dialects, drives one request through the engine, injects faults, logs truth.

Data flow: HTTP request → dialect parses it (or a 400 in the dialect's error shape) → fault
draws at arrival (500/503, 429, and the token index of a disconnect / stall / malformed chunk /
in-stream error) → a `Sequence` joins the engine's queue → the engine calls `Job.on_token` each
step → the dialect formats events, the responder writes them (one event per write by default,
`tokens_per_write` tokens per write otherwise) → `Job.on_finish` writes the tail and the truth
line.

Every response carries `x-request-id`; the OpenAI dialect's body `id` is the same string, so a
client's `response_id` keys the truth log for every dialect.
"""

from __future__ import annotations

import asyncio
import random
import time
from time import perf_counter
from typing import Any

import orjson

from capacity_plugins.simulator import embeddings_api, ollama_api, openai_api, tgi_api, triton_api
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.engine import Engine, Sequence
from capacity_plugins.simulator.http import Request, Responder
from capacity_plugins.simulator.metrics import EngineMetrics

# Re-exported: these lived here before `protocol` took them, and callers may still import them here.
from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import block_hashes
from capacity_plugins.simulator.truth import TruthLog


class Job:
    __slots__ = ("app", "dialect", "req", "resp", "params", "id", "created", "seq", "pending", "reasoning",
                 "closed", "stall_at", "stall_until", "disconnect_at", "malformed_at", "error_at",
                 "finish_waiting", "token_times", "tokens_per_write", "error_kind", "status", "head_sent")

    def __init__(self, app: SimulatorApp, dialect: Dialect, req: Request, resp: Responder, params: Params,
                 id: str) -> None:
        self.app = app
        self.dialect = dialect
        self.req = req
        self.resp = resp
        self.params = params
        self.id = id
        self.created = int(time.time())
        self.seq: Sequence = None  # type: ignore[assignment]
        self.pending = 0  # generated tokens not yet written
        self.reasoning = 0
        self.closed = False
        self.stall_at = self.disconnect_at = self.malformed_at = self.error_at = 0
        self.stall_until = 0.0
        self.finish_waiting = False
        self.token_times: list[float] = []
        self.tokens_per_write: list[int] = []
        self.error_kind: str | None = None
        self.status = 200
        self.head_sent = False

    # -- engine callbacks -----------------------------------------------------------------------
    def on_token(self, seq: Sequence) -> None:
        if self.closed:
            return
        i = seq.generated
        self.pending += 1
        if i == self.disconnect_at:
            self._flush_pending_if_streaming(i)
            self.error_kind = "stream_cut"
            self._close(abort=True)
            self.resp.abort()
            return
        if i == self.error_at:
            self._flush_pending_if_streaming(i)
            self.error_kind = "server_error"
            if not self.params.stream:
                self.status = 500
            self._close(abort=True)
            if self.params.stream:
                self.resp.end(self.dialect.stream_error(self, "simulated engine failure"))
            else:
                self.resp.send(500, self.dialect.error_body(500, "simulated engine failure"))
            return
        if not self.params.stream:
            return
        now = perf_counter()
        if now < self.stall_until:
            return
        if i == self.stall_at:
            self.stall_until = now + self.app.config.stall_s
            asyncio.get_running_loop().call_later(self.app.config.stall_s, self._stall_over)
            return
        if self.params.one_event:
            if seq.state == "done":
                self._flush(i)
            return
        k = self.app.config.tokens_per_write
        if self.pending >= k or seq.state == "done" or i == self.reasoning:
            self._flush(i)

    def on_finish(self, seq: Sequence) -> None:
        if self.closed:
            return
        if self.params.stream:
            if perf_counter() < self.stall_until:
                self.finish_waiting = True
                return
            self._flush(seq.generated)
            self._end_stream()
            return
        if self.stall_at:  # a non-streamed body is held back whole
            self.finish_waiting = True
            self.stall_until = perf_counter() + self.app.config.stall_s
            asyncio.get_running_loop().call_later(self.app.config.stall_s, self._stall_over)
            return
        self._send_full()
        self._close()

    def lost(self) -> None:
        """The client closed the connection before the response ended."""
        if not self.closed:
            self.error_kind = "cancelled"
            self._close(abort=True)

    # -- writing ------------------------------------------------------------------------------
    def _send_full(self) -> None:
        n = self.seq.generated
        if self.malformed_at:
            self.error_kind = "malformed"
            body = self.dialect.full_body(self)[:-7]
        else:
            body = self.dialect.full_body(self)
        t = self.resp.send(200, body)
        self.token_times.append(t - self.req.arrival)
        self.tokens_per_write.append(n)

    def _end_stream(self) -> None:
        # Truth first: a client that has read the whole stream finds its truth line already there.
        tail = self.dialect.stream_tail(self)
        self._close()
        self.resp.end(tail)

    def _flush_pending_if_streaming(self, upto: int) -> None:
        # Tokens generated before a fault index are written first, so the cut lands mid-stream.
        self.pending -= 1
        if self.params.stream and not self.params.one_event and self.pending > 0 \
                and perf_counter() >= self.stall_until:
            self._flush(upto - 1)
        self.pending = 0

    def _flush(self, upto: int) -> None:
        """Write the `pending` tokens ending at token index `upto` (1-based)."""
        n = self.pending
        if n <= 0:
            return
        self.pending = 0
        d = self.dialect
        if not self.head_sent:
            self.head_sent = True
            for event in d.stream_head(self):
                self.resp.chunk(event)
        arrival = self.req.arrival
        if self.malformed_at and upto - n < self.malformed_at <= upto:
            self.error_kind = "malformed"
            t = self.resp.chunk(d.malformed(self))
        else:
            last = self.seq.state == "done" and upto == self.seq.generated
            first = upto - n + 1
            r = self.reasoning
            if first <= r < upto:  # a write never mixes channels: split at the boundary
                t = self.resp.chunk(d.token_event(self, first, r, True, False))
                self.token_times.append(t - arrival)
                self.tokens_per_write.append(r - first + 1)
                n = upto - r
                t = self.resp.chunk(d.token_event(self, r + 1, upto, False, last))
            else:
                t = self.resp.chunk(d.token_event(self, first, upto, upto <= r, last))
        self.token_times.append(t - arrival)
        self.tokens_per_write.append(n)

    def _stall_over(self) -> None:
        if self.closed:
            return
        self.stall_until = 0.0
        if self.params.stream:
            if not self.params.one_event or self.finish_waiting:
                self._flush(self.seq.generated)
            if self.finish_waiting:
                self._end_stream()
        elif self.finish_waiting:
            self._send_full()
            self._close()

    def _close(self, abort: bool = False) -> None:
        self.closed = True
        if abort and self.app.engine.abort(self.seq):
            self.app.metrics.request_failed("CANCELED" if self.error_kind == "cancelled" else "BACKEND")
        self.app.log_truth(self, self.seq)


__all__ = ["BadRequest", "Dialect", "Job", "JobView", "Params", "SimulatorApp"]


class SimulatorApp:
    def __init__(self, config: SimConfig, truth: TruthLog | None = None) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.metrics = EngineMetrics(config)
        self.engine = Engine(config, self.metrics, self.rng)
        self.truth = truth
        openai = openai_api.OpenAIDialect(config)
        tgi = tgi_api.TGIDialect(config)
        ollama = ollama_api.OllamaDialect(config)
        self.triton = triton_api.TritonDialect(config)
        items = embeddings_api.ItemsDialect(config)
        self.posts: dict[str, tuple[Dialect, str]] = {
            "/v1/chat/completions": (openai, "chat"),
            "/v1/completions": (openai, "completion"),
            "/generate": (tgi, "generate"),
            "/generate_stream": (tgi, "generate_stream"),
            "/api/chat": (ollama, "chat"),
            "/api/generate": (ollama, "generate"),
            "/v1/embeddings": (items, "embeddings"),
            "/embed": (items, "tei-embed"),
            "/v1/rerank": (items, "rerank"),
            "/rerank": (items, "rerank"),
        }
        self.gets: dict[str, Any] = {
            "/health": lambda: (200, b"", "application/json"),
            "/metrics": lambda: (200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8"),
            "/v1/models": lambda: (200, openai.models_body(), "application/json"),
            "/version": lambda: (200, b'{"version":"0.11.0-sim"}', "application/json"),
            "/info": lambda: (200, tgi.info_body(), "application/json"),
            "/api/tags": lambda: (200, ollama.tags_body(), "application/json"),
            "/api/version": lambda: (200, b'{"version":"0.6.0-sim"}', "application/json"),
        }

    # -- HTTP entry -----------------------------------------------------------------------------
    def handle(self, req: Request, resp: Responder) -> None:
        if req.path.startswith("/v2"):
            self._handle_v2(req, resp)
            return
        route = self.posts.get(req.path)
        if route is not None:
            if req.method != "POST":
                resp.send(405, route[0].error_body(405, f"method {req.method} not allowed on {req.path}"))
                return
            self._generate(route[0], route[1], req, resp)
            return
        get = self.gets.get(req.path)
        if get is not None and req.method == "GET":
            status, body, ctype = get()
            resp.send(status, body, ctype)
            return
        body = b'{"object":"error","message":"Not Found: %s","type":"NotFoundError","param":null,"code":404}'
        resp.send(404, body % req.path.encode("ascii", "replace").replace(b'"', b"'"))

    def _handle_v2(self, req: Request, resp: Responder) -> None:
        """Triton's KServe-v2 paths: health, metadata and the generate extension."""
        triton = self.triton
        get = req.method == "GET"
        if req.path in ("/v2/health/ready", "/v2/health/live") and get:
            resp.send(200, b"", "application/json")
            return
        if req.path == "/v2" and get:
            resp.send(200, triton.server_metadata_body())
            return
        m = triton_api.MODEL_PATH.match(req.path)
        if m is None or m.group(3) not in (None, "ready", "generate", "generate_stream"):
            resp.send(404, triton.error_body(404, "Not Found"))
            return
        name, version, action = m.groups()
        if name != self.config.model or version not in (None, triton_api.MODEL_VERSION):
            resp.send(404, triton.error_body(404, triton_api.unknown_model(name, version)))
            return
        if action in ("generate", "generate_stream"):
            if req.method != "POST":
                resp.send(405, triton.error_body(405, "Method Not Allowed"))
                return
            self._generate(triton, action, req, resp)
        elif not get:
            resp.send(405, triton.error_body(405, "Method Not Allowed"))
        elif action == "ready":
            resp.send(200, b"", "application/json")
        else:
            resp.send(200, triton.model_metadata_body())

    def _generate(self, dialect: Dialect, kind: str, req: Request, resp: Responder) -> None:
        cfg = self.config
        rid = dialect.new_id(kind)
        resp.extra_headers = f"x-request-id: {rid}\r\n"
        try:
            try:
                body = orjson.loads(req.body)
            except orjson.JSONDecodeError as e:
                raise BadRequest(f"request body is not valid JSON: {e}") from None
            if not isinstance(body, dict):
                raise BadRequest("request body must be a JSON object")
            params = dialect.parse(kind, body)
        except BadRequest as e:
            resp.send(e.status, dialect.error_body(e.status, str(e)))
            self._log_rejected(dialect, rid, req, e.status, "http_4xx")
            return
        job = Job(self, dialect, req, resp, params, rid)
        rng = self.rng
        if cfg.error_rate and rng.random() < cfg.error_rate:
            status = 500 if rng.random() < 0.5 else 503
            resp.send(status, dialect.error_body(status, "simulated server error"))
            self.metrics.request_failed("BACKEND")
            self._log_rejected(dialect, rid, req, status, "http_5xx", params.prompt_tokens)
            return
        if cfg.queue_limit_429 and len(self.engine.waiting) >= cfg.queue_limit_429:
            resp.send(429, dialect.error_body(429, "simulated overload: the waiting queue is full"))
            self.metrics.request_failed("REJECTED")
            self._log_rejected(dialect, rid, req, 429, "http_429", params.prompt_tokens)
            return
        target = self.engine.output_length(params.max_tokens, params.min_tokens, params.ignore_eos)
        job.reasoning = min(cfg.reasoning_tokens, target) if dialect.reasoning_channel else 0
        # Fault positions are token indices in 1..target-1, so every fault lands mid-stream.
        if target >= 2:
            if cfg.disconnect_prob and rng.random() < cfg.disconnect_prob:
                job.disconnect_at = rng.randint(1, target - 1)
            if cfg.stream_error_prob and rng.random() < cfg.stream_error_prob:
                job.error_at = rng.randint(1, target - 1)
            if cfg.malformed_prob and rng.random() < cfg.malformed_prob:
                job.malformed_at = rng.randint(1, target - 1)
        if cfg.stall_prob and cfg.stall_s > 0 and rng.random() < cfg.stall_prob:
            job.stall_at = rng.randint(1, target)
        blocks = block_hashes(params.units, cfg.block_size) if cfg.prefix_cache else []
        seq = Sequence(rid, params.prompt_tokens, blocks, params.max_tokens, target, req.arrival,
                       job.on_token, job.on_finish)
        seq.adapter = params.adapter
        job.seq = seq
        resp.set_on_lost(job.lost)
        if params.stream:
            resp.start(200, dialect.content_type)
        self.engine.submit(seq)

    # -- truth log ------------------------------------------------------------------------------
    def _log_rejected(self, dialect: Dialect, rid: str, req: Request, status: int, kind: str,
                      prompt_tokens: int = 0) -> None:
        if self.truth is None:
            return
        self.truth.write({
            "id": rid, "dialect": dialect.name, "arrival_unix": _unix(req.arrival), "queue_s": None,
            "prefill_s": None, "first_token_s": None, "token_times_s": [], "tokens_per_write": [],
            "prompt_tokens": prompt_tokens, "output_tokens": 0, "status": status, "error_kind": kind,
        })

    def log_truth(self, job: Job, seq: Sequence) -> None:
        if self.truth is None:
            return
        arrival = seq.arrival
        # Engine-side phases of a request the engine finished, equal to what the vLLM histograms observed.
        decode_s = e2e_s = None
        last, first = seq.last_token_at, seq.first_token_at
        if seq.finish_reason in ("stop", "length") and last is not None and first is not None:
            decode_s, e2e_s = last - first, last - arrival
        self.truth.write({
            "id": job.id, "dialect": job.dialect.name, "arrival_unix": _unix(arrival),
            "queue_s": None if seq.admitted_at is None else seq.admitted_at - arrival,
            "prefill_s": None if seq.first_token_at is None or seq.admitted_at is None
            else seq.first_token_at - seq.admitted_at,
            "first_token_s": job.token_times[0] if job.token_times else None,
            "token_times_s": job.token_times, "tokens_per_write": job.tokens_per_write,
            "prompt_tokens": seq.prompt_tokens, "output_tokens": sum(job.tokens_per_write),
            "generated_tokens": seq.generated, "finish_reason": seq.finish_reason, "stream": job.params.stream,
            "status": job.status, "error_kind": job.error_kind,
            "decode_s": decode_s, "e2e_s": e2e_s, "cached_tokens": seq.cached_tokens, "service_factor": seq.factor,
        })


_PERF0 = perf_counter()
_UNIX0 = time.time()


def _unix(perf: float) -> float:
    # One offset taken at start: arrival_unix and the token offsets share the perf_counter clock.
    return _UNIX0 + (perf - _PERF0)
