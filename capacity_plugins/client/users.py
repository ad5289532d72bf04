"""LLMUser: one streaming LLM call per task iteration, measured as docs/metrics.md defines.

How one call is measured (the numbers users buy GPUs with):
- The body is read from geventhttpclient's buffer as soon as a line is complete (Locust's
  `iter_lines`/`iter_content` wait for 1 KiB and would shift TTFT/ITL). Each line is stamped with
  `perf_counter_ns()` *before* parsing.
- We drive geventhttpclient's HTTPClient from the user's own FastHttpSession pool (connection
  reuse, TLS settings) instead of `self.client.post(...)`, so Locust fires no request event of its
  own; we fire exactly one per LLM call: response_time = E2E ms, response_length = output tokens,
  exception = the classified failure. No extra TTFT rows (they would double the RPS).
- Nothing raises out of a call: every failure becomes a record with an `error_kind`. A user killed
  at the end of the test mid-request records `cancelled`, then lets GreenletExit continue.
- Retries (opt-in) record every attempt; the first failure is never hidden.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
import time
from time import perf_counter_ns
from typing import Any, Protocol

import gevent
from gevent import GreenletExit
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from geventhttpclient.url import URL
from locust import FastHttpUser, constant, task

from capacity_plugins.client.backoff import retry_after_s
from capacity_plugins.client.client import LLMClient
from capacity_plugins.client.ids import request_id
from capacity_plugins.client.lane import WorkloadLane
from capacity_plugins.client.stream import (
    FIRST_READS,
    RequestTimeout,
    prepare_connections,
    read_body,
    read_stream,
    yield_to_first_reads,
)
from capacity_plugins.contracts.clock import master_time
from capacity_plugins.contracts.records import RequestRecord, Timings
from capacity_plugins.corpus.images import synthetic_images
from capacity_plugins.corpus.trace import trace_sample
from capacity_plugins.dialects import MalformedEvent

log = logging.getLogger(__name__)

RETRYABLE = frozenset({"http_429", "http_5xx", "connect"})
_ERROR_BODY_LIMIT = 64 * 1024


class LLMRequestError(Exception):
    """The failure handed to Locust's request event. Its text is the error kind (plus HTTP status)
    only, so Locust groups failures by class rather than by variable server messages."""

    def __init__(self, kind: str, status: int = 0) -> None:
        super().__init__(f"{kind} (HTTP {status})" if status else kind)
        self.kind = kind
        self.status = status


def _status_kind(status: int) -> str:
    if status == 429:
        return "http_429"
    return "http_5xx" if status >= 500 else "http_4xx"


PLUGIN_WAIT_S = 60.0  # longest a user waits for the plugin's init (a corpus read on a busy host)


class Source(Protocol):
    """What a user reads of the rehearsal: what to send next, and when (rehearsal/source.py
    `RequestSource`, attached as `environment.capacity_source`)."""

    worker_index: int
    sampler: Any  # None before this process has its shard of the corpus
    pacer: Any  # None = closed loop; else wait_arrival() -> (scheduled_unix, request) | None, release()
    trace_block_tokens: int
    trace_sessions: bool
    sessions: Any  # rehearsal/sessions.py SessionStore
    agentic: Any  # an agentic load's session scripts on this process (rehearsal/source.py AgenticDeck), else None

    def step_at(self, now_unix: float) -> tuple[int | None, bool]: ...

    def may_send(self, now_unix: float) -> bool: ...

    def next_request(self, now_unix: float) -> tuple[Any, WorkloadLane | None]: ...


def _trace_class(sample: Any) -> str | None:
    """A trace request's own `class` (corpus/trace.py), recorded as its workload; None otherwise."""
    klass = getattr(sample, "workload_class", None)
    return None if klass in (None, "default") else str(klass)


class LLMUser(FastHttpUser):
    """Sends corpus prompts to an LLM server through the run's dialect.

    Locust's `response_time` for these requests is the **end-to-end** time (send → last byte),
    and `response_length` the output token count. TTFT/ITL/TPOT live in the per-request records
    (requests.jsonl) and the LLM stats (llm_stats.csv / web UI tab).
    """

    abstract = True
    wait_time = constant(0)  # closed loop; open loop goes through the source's pacer

    def __init__(self, environment: Any) -> None:
        # A worker joining a running test hears the master's spawn while Locust still connects it,
        # before `init` (and so the plugin) has run: this user waits for the plugin, briefly.
        deadline = time.monotonic() + PLUGIN_WAIT_S
        while getattr(environment, "capacity_source", None) is None and time.monotonic() < deadline:
            gevent.sleep(0.05)
        llm = LLMClient.of(environment)  # attached before the source: both are there now
        # FastHttpUser builds its session from these attributes in __init__: set them first.
        self.insecure = llm.options.insecure  # verify TLS unless --insecure
        self.network_timeout = llm.options.timeout_s
        self.connection_timeout = llm.options.timeout_s
        super().__init__(environment)
        self.llm: LLMClient = llm  # how to ask, and where the record goes (self.client is Locust's HTTP session)
        self.source: Source = environment.capacity_source  # what to send next, and when
        self._pool = self.client.client.clientpool
        # kernel arrival stamps from each connection's first response (its headers may carry the
        # first token), not from the second one on
        prepare_connections(self._pool)
        self._base = (self.host or "").rstrip("/")
        self._retry_after_s: float | None = None
        self._last_text: str | None = None  # the last answer's text, kept for a session's history
        self._last_calls: list[list[str]] = []  # and its tool calls (an agentic session's)

    @task
    def llm_request(self) -> None:
        source, llm = self.source, self.llm
        if source.sampler is None:  # a worker before the master's setup arrived: take no arrival yet
            gevent.sleep(0.1)
            return
        if not source.may_send(master_time()):  # the step's window closed: drain, start nothing new
            gevent.sleep(0.05)
            return
        pause = llm.backoff.remaining()
        if pause > 0:  # the server refused connections: nobody sends for a while (client/backoff.py)
            gevent.sleep(min(pause, 0.05) if source.pacer is not None else pause)
            return
        if source.agentic is not None:  # closed loop: this user walks one whole session, then the next
            self._agentic_session()
            return
        scheduled_unix = None
        request = None
        pacer = source.pacer
        if pacer is not None:
            arrival = pacer.wait_arrival()
            if arrival is None:
                gevent.sleep(0.05)  # no arrival for us right now; ask again shortly
                return
            scheduled_unix, request = arrival
        try:
            if request is not None and source.trace_sessions and len(request) > 6 and request[6] is not None:
                self._session_turn(request, scheduled_unix)
                return
            # A trace replay's arrival names its own request (lengths, shared prefix blocks).
            if request is not None:
                self.call(trace_sample(request, source.trace_block_tokens), scheduled_unix)
            else:
                sample, lane = source.next_request(master_time())  # a workload class's draw, or the run's
                self.call(sample, scheduled_unix, lane)
        finally:
            if pacer is not None and scheduled_unix is not None:
                pacer.release()

    def _session_turn(self, request: Any, scheduled_unix: float | None) -> None:
        """One turn of a conversation (load.sessions): the history with the server's answers, then
        this turn's message; the next turn of the session waits for this one (client/sessions.py)."""
        sessions = self.source.sessions
        sid = str(request[6])
        history = sessions.begin(sid, self.llm.options.timeout_s)
        sample = trace_sample(request, self.source.trace_block_tokens, history=history)
        answer = None
        try:
            self._last_text = None
            record = self.call(sample, scheduled_unix)
            answer = self._last_text if record.ok else None
        finally:
            sessions.end(sid, (sample.messages or [{}])[-1].get("content", ""), answer)

    def _agentic_session(self) -> None:
        """One agentic session, all of it by this user (so on this process): model calls with the
        whole history, the tools' latencies between them (client/sessions.py run_agentic)."""
        from capacity_plugins.client.sessions import Answer, run_agentic

        script, run_id, rng = self.source.agentic.next()
        source = self.source

        def send(sample: Any) -> Answer:
            self._last_text, self._last_calls = None, []
            record = self.call(sample)
            return Answer(record.ok, self._last_text, self._last_calls, record.sent_unix)

        run_agentic(script, run_id, send=send, wait=gevent.sleep, clock=time.perf_counter,
                    may_send=lambda: source.may_send(master_time()), rng=rng)

    def call(self, sample: Any, scheduled_unix: float | None = None, lane: WorkloadLane | None = None) -> RequestRecord:
        """Send one sample (with opt-in retries) with its workload class's settings (the run's
        without one); every attempt is recorded. Returns the last."""
        retries = self.llm.options.retries
        attempt = 1
        while True:
            self._retry_after_s = None
            record = self._attempt(sample, scheduled_unix, attempt, lane)
            if record.error_kind in ("connect", "protocol"):
                self.llm.backoff.failed(record.step)
            elif record.status:
                self.llm.backoff.succeeded()
            if record.ok or record.error_kind not in RETRYABLE or attempt > retries:
                return record
            wait = self._retry_after_s  # the server said when (429 / 503 Retry-After)
            gevent.sleep(wait if wait is not None else min(0.1 * 2 ** (attempt - 1), 2.0))
            attempt += 1

    # -- one attempt ------------------------------------------------------------------------

    def _attempt(self, sample: Any, scheduled_unix: float | None, attempt: int,
                 lane: WorkloadLane | None = None) -> RequestRecord:
        yield_to_first_reads()  # before the send stamp: what it waits for is not this request's
        llm = self.llm
        params = lane.params if lane is not None else llm.params
        images = getattr(sample, "images", ())
        if params.images and not images:  # synthetic images, made when the run was set up
            images = synthetic_images(params.images, params.image_size)
            sample = dataclasses.replace(sample, images=images)
        call = llm.dialect.build(sample, params)
        parser = llm.dialect.parser(params.stream)
        session_id = getattr(sample, "session_id", None)
        if llm.tokenizer is not None or session_id is not None:
            parser.keep_text()  # a session's next turn sends this answer back
        headers = llm.request_headers(call.headers)
        now_unix = master_time()
        step, warmup = self.source.step_at(now_unix)
        t = Timings(sent_unix=now_unix, sent_ns=perf_counter_ns(), scheduled_unix=scheduled_unix)
        status = 0
        kind: str | None = None
        error: str | None = None
        resp = None
        header_id: str | None = None
        cancelled: BaseException | None = None
        try:
            # The gevent timeout covers waits (connect, headers, a silent server); the readers
            # check the same deadline themselves while data keeps arriving (client/stream.py).
            deadline_ns = t.sent_ns + int(llm.options.timeout_s * 1e9)
            with gevent.Timeout(llm.options.timeout_s, RequestTimeout):
                url = URL(self._base + call.path)
                conn = self._pool.get_client(url)
                resp = conn.request(call.method, url.request_uri, body=call.body, headers=headers)
                status = resp.status_code
                rid = resp.get("x-request-id")
                header_id = rid if isinstance(rid, str) else None
                ctype = str(resp.get("content-type") or "").lower()
                if status >= 400:
                    kind = _status_kind(status)
                    self._retry_after_s = retry_after_s(resp.get("retry-after"))
                    error = f"HTTP {status}: " + resp.read(_ERROR_BODY_LIMIT)[:300].decode("utf-8", "replace")
                elif "text/html" in ctype:
                    # a proxy's or a load balancer's page instead of the API's answer
                    page = resp.read(_ERROR_BODY_LIMIT)[:300].decode("utf-8", "replace")
                    kind, error = "server_error", f"HTTP {status} with an HTML page instead of a response: {page}"
                elif params.stream and not ("json" in ctype and parser.framing == "sse"):
                    read_stream(resp, parser, t, deadline_ns=deadline_ns)
                else:
                    # not streamed, or a JSON body where an event stream was asked for (servers
                    # answer errors like that with 200): parse it whole, so its message is kept
                    body = read_body(resp, deadline_ns=deadline_ns)
                    t.end_ns = perf_counter_ns()
                    parser.full(body)
                if kind is None:
                    if parser.error is not None:
                        kind, error = "server_error", parser.error
                    elif params.stream and not parser.done:
                        kind, error = "stream_cut", "stream ended before the server said it was done"
        except RequestTimeout:
            kind, error = "timeout", f"no complete response within {llm.options.timeout_s:g} s"
        except MalformedEvent as e:
            kind, error = "malformed", str(e)
        except GreenletExit as e:  # the test is stopping: record, then let the kill proceed
            kind, error, cancelled = "cancelled", llm.cancel_reason or "test stopped while the request was in flight", e
        except TimeoutError:
            kind, error = "timeout", f"socket read timed out after {llm.options.timeout_s:g} s"
        except ssl.SSLError as e:
            kind, error = "connect", f"TLS: {e.__class__.__name__}: {e}"[:300]
        except HTTPParseError as e:
            # Not HTTP at all (before a status) or a broken HTTP message: the server spoke, badly.
            kind = "stream_cut" if status else "protocol"
            error = f"{e.__class__.__name__}: {e}"[:300]
        except (HTTPConnectionClosed, OSError) as e:
            if status:
                kind, error = "stream_cut", f"{e.__class__.__name__}: {e}"[:300]
            else:
                kind, error = "connect", f"{e.__class__.__name__}: {e}"[:300]
        except Exception as e:  # never let a surprise escape: the record would be lost
            log.exception("unexpected error in LLM request")
            kind = "stream_cut" if status else "connect"
            error = f"unexpected {e.__class__.__name__}: {e}"[:300]
        finally:
            if t.end_ns is None:
                t.end_ns = perf_counter_ns()
            FIRST_READS.over()  # an answer not streamed, an error, a timeout: no first read due
            if resp is not None:
                resp.release()  # returns a fully read socket to the pool, closes anything else
        yield_to_first_reads()  # this record's making and the next request's send wait too
        if step is not None and t.reads:
            llm.count_reads(step, t.reads, t.backlog_reads)
        # Counted after the last stamp, and only when the server gave no count of its own. A
        # non-streamed failure with no text keeps no count, as without a tokenizer.
        tokenizer_tokens = None
        text = parser.generated_text()
        self._last_text = text
        self._last_calls = parser.calls or []
        # (a session keeps the text without a tokenizer: then there is nothing to count with)
        if (llm.tokenizer is not None and text is not None and (text or params.stream)
                and parser.usage_output_tokens is None and parser.continuous_output_tokens is None):
            tokenizer_tokens = llm.count_tokens(text)
        chunks = len(t.token_ns) if params.stream else None
        llm.token_evidence.observe(parser.finish_reason, call.max_tokens, chunks, tokenizer_tokens)
        record = RequestRecord.build(
            t,
            request_id=request_id(),
            # TGI/Ollama bodies carry no id; servers that set x-request-id still let records join
            response_id=parser.response_id or header_id,
            prompt_id=getattr(sample, "id", None),
            worker=self.source.worker_index,
            step=step,
            warmup=warmup,
            attempt=attempt,
            status=status,
            error_kind=kind,
            error=llm.secrets.scrub(error) if error else error,  # a server may echo the key back
            usage_output_tokens=parser.usage_output_tokens,
            continuous_output_tokens=parser.continuous_output_tokens,
            prompt_tokens=parser.prompt_tokens,
            max_tokens=call.max_tokens,
            stream=params.stream,
            # the workload class drawn for it, or a trace request's own `class`
            workload=lane.name if lane is not None else _trace_class(sample),
            session_id=session_id,
            turn=getattr(sample, "turn", None),
            tokenizer_output_tokens=tokenizer_tokens,
            prefer_chunks=llm.token_evidence.prefer_chunks,
            finish_reason=parser.finish_reason,
            usage_reasoning_tokens=parser.usage_reasoning_tokens,
            tool_wait_ms=getattr(sample, "tool_wait_ms", None),
            # an agentic session's last call: its completion time from the session's first send
            session_start_unix=(getattr(sample, "session_start_unix", None) or now_unix)
            if getattr(sample, "last_turn", False) else None,
            images=images,
        )
        self._finish(record, lane.request_name if lane is not None else llm.request_name)
        if cancelled is not None:
            raise cancelled
        return record

    def _finish(self, record: RequestRecord, name: str) -> None:
        llm = self.llm
        if llm.records is not None:
            llm.records.add(record)  # first: whatever happens below, the record is kept
        if record.error_kind == "cancelled":
            # Stopped by the test, not failed by the server: recorded (above), but neither a Locust
            # failure (a timed run would "fail" every CI pipeline) nor a live error.
            return
        output = record.output_tokens or 0
        llm.stats.record(
            name,
            ok=record.ok,
            error_kind=record.error_kind,
            ttft_ms=record.ttft_ms,
            itl_ms=record.itl_ms,
            tpot_ms=record.tpot_ms,
            e2e_ms=record.e2e_ms,
            output_tokens=output,
            prompt_tokens=record.prompt_tokens,
            now_unix=master_time(),
        )
        self.environment.events.request.fire(
            request_type="POST",
            name=name,
            response_time=record.e2e_ms,
            response_length=output,
            exception=None if record.ok else LLMRequestError(record.error_kind or "error", record.status),
            context={"record": record},
            url=None,
            start_time=record.sent_unix,
        )
