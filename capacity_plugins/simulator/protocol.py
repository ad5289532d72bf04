"""What a wire dialect implements and what it may read: the contract between `app` and the API modules.

The dependency runs one way: `openai_api` / `tgi_api` / `ollama_api` / `triton_api` import this
module, `app` imports them. A dialect parses a body into `Params` (or raises `BadRequest` with the
status its server would send) and formats events for one request, reading the request through
`JobView` — the few fields of `app.Job` a formatter needs, so nothing here depends on how the app
drives a request.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.engine import Sequence


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Params:
    """What a dialect extracted from a request body.

    `one_event`: a streamed response whose tokens are all written in one event at the end (Triton's
    generate_stream when the request does not ask the backend to stream). `echo_id`: a request id
    the client sent that every response event repeats (Triton's `id`).
    """

    __slots__ = ("kind", "stream", "units", "prompt_tokens", "max_tokens", "min_tokens", "ignore_eos",
                 "include_usage", "continuous_usage", "details", "one_event", "echo_id", "adapter", "items",
                 "tool_calls")

    def __init__(self, kind: str, stream: bool, units: list[str], prompt_tokens: int, max_tokens: int,
                 min_tokens: int = 0, ignore_eos: bool = False, include_usage: bool = False,
                 continuous_usage: bool = False, details: bool = False, one_event: bool = False,
                 echo_id: str | None = None) -> None:
        self.kind = kind
        self.stream = stream
        self.units = units
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.ignore_eos = ignore_eos
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.details = details
        self.one_event = one_event
        self.echo_id = echo_id
        self.adapter: str | None = None  # the LoRA adapter the request names (simulator/lora.py)
        self.items = 1  # inputs of an embeddings / rerank request (simulator/embeddings_api.py)
        # The tools this answer calls, in order (openai_api.py: a named `tool_choice`, or every
        # offered tool with `required`); its output tokens are then the calls' arguments.
        self.tool_calls: list[str] = []


class JobView(Protocol):
    """The request a dialect formats events for (implemented by `app.Job`)."""

    @property
    def id(self) -> str: ...
    @property
    def params(self) -> Params: ...
    @property
    def seq(self) -> Sequence: ...
    @property
    def created(self) -> int: ...
    @property
    def reasoning(self) -> int: ...


class Dialect:
    """One API's wire format. Subclasses fill these in; `app.Job` calls them."""

    name = "base"
    content_type = "text/event-stream"
    id_prefix = "req-"
    reasoning_channel = True  # False: reasoning tokens are plain output (no separate delta to split at)

    def __init__(self, config: SimConfig) -> None:
        self.config = config

    def new_id(self, kind: str) -> str:
        return self.id_prefix + uuid.uuid4().hex

    def parse(self, kind: str, body: Any) -> Params:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> bytes:
        raise NotImplementedError

    def stream_head(self, job: JobView) -> list[bytes]:
        """Events written together with the first token (e.g. the chat role chunk)."""
        return []

    def token_event(self, job: JobView, first: int, upto: int, reasoning: bool, last: bool) -> bytes:
        """The event(s) of one write carrying output tokens first..upto (1-based, inclusive)."""
        raise NotImplementedError

    def stream_tail(self, job: JobView) -> list[bytes]:
        raise NotImplementedError

    def stream_error(self, job: JobView, message: str) -> list[bytes]:
        raise NotImplementedError

    def malformed(self, job: JobView) -> bytes:
        raise NotImplementedError

    def full_body(self, job: JobView) -> bytes:
        raise NotImplementedError
