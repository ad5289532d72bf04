"""Ollama native API: /api/chat and /api/generate, NDJSON streaming.

Stream lines: `{"message": {"content", "thinking"}, "done": false}` (chat) or `{"response",
"thinking", "done": false}` (generate); the last line has `done: true`, `eval_count` (output tokens)
and `prompt_eval_count`. Errors arrive as `{"error": "..."}`. Ollama has no response id.
"""

from __future__ import annotations

from typing import Any

import orjson

from capacity_plugins.contracts.images import ImagePart
from capacity_plugins.dialects.base import (
    NO_OUTPUT,
    OUTPUT,
    REASONING,
    VISIBLE,
    HttpCall,
    MalformedEvent,
    Parser,
    RequestParams,
    SampleLike,
    count,
    effective_max_tokens,
    error_text,
    is_error_payload,
    keep_message_text,
    listed_names,
    reason,
    with_images,
)


class _OllamaParser(Parser):
    framing = "ndjson"
    __slots__ = ()
    _chat = True

    def _doc(self, data: bytes) -> dict[str, Any]:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON line: {e}") from None
        if not isinstance(doc, dict):
            raise MalformedEvent("NDJSON line is not a JSON object")
        return doc

    def _classify(self, doc: dict[str, Any]) -> int:
        if is_error_payload(doc):
            self.error = error_text(doc)
            return NO_OUTPUT
        if doc.get("done"):
            self.done = True
            self.finish_reason = reason(doc.get("done_reason"))
            evaluated = count(doc.get("eval_count"))
            if evaluated is not None:
                self.usage_output_tokens = evaluated
            prompt = count(doc.get("prompt_eval_count"))
            if prompt is not None:
                self.prompt_tokens = prompt
        part = (doc.get("message") or {}) if self._chat else doc
        if not isinstance(part, dict):
            raise MalformedEvent("message is not an object")
        text_key = "content" if self._chat else "response"
        if self.texts is not None:
            keep_message_text(self.texts, part, text_key)
        if part.get(text_key):
            return VISIBLE
        if part.get("thinking"):
            return REASONING
        if part.get("tool_calls"):
            return OUTPUT
        return NO_OUTPUT

    def event(self, data: bytes) -> int:
        return self._classify(self._doc(data))

    def full(self, body: bytes) -> int:
        return self._classify(self._doc(body))


class _OllamaChatParser(_OllamaParser):
    __slots__ = ()
    _chat = True


class _OllamaGenerateParser(_OllamaParser):
    __slots__ = ()
    _chat = False


def _options(params: RequestParams, max_tokens: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if params.temperature is not None:
        options["temperature"] = params.temperature
    if params.top_p is not None:
        options["top_p"] = params.top_p
    return options


def _parse_models(body: bytes) -> list[str] | None:
    """`GET /api/tags`: `{"models": [{"name": "llama3:latest", "model": ..., ...}]}` → the names
    (with their tag: matching `llama3` against `llama3:latest` is the caller's choice)."""
    return listed_names(body, "models", "name")


def _images(message: dict[str, Any], images: tuple[ImagePart, ...]) -> dict[str, Any]:
    """A user message with Ollama's `images`: base64 payloads, no data: prefix (a URL cannot be
    sent this way; the runner refuses a corpus that names one for this dialect)."""
    return {**message, "images": [*(message.get("images") or ()), *(im.url or im.base64() for im in images)]}


class OllamaChat:
    name = "ollama"
    models_path = "/api/tags"
    parse_models = staticmethod(_parse_models)

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        max_tokens = effective_max_tokens(sample, params)
        body = {
            "model": params.model,
            "messages": with_images(sample, _images),
            "stream": params.stream,
            "options": _options(params, max_tokens),
        }
        return HttpCall("POST", "/api/chat", orjson.dumps(body), {"Content-Type": "application/json"}, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _OllamaChatParser()


class OllamaGenerate:
    name = "ollama-generate"
    models_path = "/api/tags"
    parse_models = staticmethod(_parse_models)

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        max_tokens = effective_max_tokens(sample, params)
        body = {
            "model": params.model,
            "prompt": sample.text,
            "stream": params.stream,
            "options": _options(params, max_tokens),
        }
        return HttpCall("POST", "/api/generate", orjson.dumps(body), {"Content-Type": "application/json"}, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _OllamaGenerateParser()
