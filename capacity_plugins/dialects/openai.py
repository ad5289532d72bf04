"""OpenAI-compatible chat and completions (vLLM, SGLang, TGI's /v1, Ollama's /v1, OpenAI).

Streaming framing: SSE `data: {chunk}` lines, optional `data: [DONE]`. Token channels in a chat
delta: `content` (visible), `reasoning_content` / `reasoning` (reasoning models), `tool_calls`.
Usage: with `stream_options.include_usage` the last chunk has `choices: []` and the final `usage`;
vLLM's `continuous_usage_stats` puts a running `usage` on every chunk.
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
    keep_tool_calls,
    listed_names,
    reason,
    with_images,
)

_HEADERS = {"Content-Type": "application/json"}


def _common_body(params: RequestParams, max_tokens: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": params.model, "stream": params.stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if params.temperature is not None:
        body["temperature"] = params.temperature
    if params.top_p is not None:
        body["top_p"] = params.top_p
    if params.stream and params.include_usage:
        body["stream_options"] = {"include_usage": True}
    if params.ignore_eos:
        # vLLM / SGLang extension: generate exactly max_tokens, so output lengths are controlled
        body["ignore_eos"] = True
        if max_tokens is not None:
            body["min_tokens"] = max_tokens
    return body


class _OpenAIParser(Parser):
    __slots__ = ()
    _chat = True

    def _usage(self, usage: Any, final: bool) -> None:
        if not isinstance(usage, dict):
            return  # not a usage object: the server said no count
        prompt = count(usage.get("prompt_tokens"))
        if prompt is not None:
            self.prompt_tokens = prompt
        completion = count(usage.get("completion_tokens"))
        if completion is None:
            return
        if final:
            self.usage_output_tokens = completion
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict):  # OpenAI's; vLLM sends null or nothing
                self.usage_reasoning_tokens = count(details.get("reasoning_tokens"))
        else:
            prev = self.continuous_output_tokens or 0
            # A running count that goes back says nothing about this chunk's tokens.
            self.chunk_tokens = completion - prev if completion >= prev else None
            self.continuous_output_tokens = completion

    def _error(self, doc: dict[str, Any]) -> bool:
        """Record an error payload: `{"error": {...}}`, or vLLM's older unwrapped ErrorResponse
        `{"object": "error", "message": ..., "type": ..., "code": ...}`."""
        if is_error_payload(doc):
            self.error = error_text(doc["error"])
        elif doc.get("object") == "error":
            self.error = error_text(doc)
        else:
            return False
        return True

    def _id(self, doc: dict[str, Any]) -> None:
        rid = doc.get("id")
        if isinstance(rid, str):
            self.response_id = rid

    def _keep(self, choice: dict[str, Any], key: str) -> None:
        assert self.texts is not None
        if self._chat:
            part = choice.get(key)
            keep_message_text(self.texts, part)
            if self.calls is not None and isinstance(part, dict):
                keep_tool_calls(self.calls, part.get("tool_calls"))
        elif isinstance(choice.get("text"), str):
            self.texts.append(choice["text"])

    @staticmethod
    def _first_choice(choices: Any) -> dict[str, Any]:
        if not isinstance(choices, list):
            raise MalformedEvent("choices is not a list")
        choice = choices[0]
        if not isinstance(choice, dict):
            raise MalformedEvent("choices[0] is not an object")
        return choice

    def event(self, data: bytes) -> int:
        if data == b"[DONE]":
            self.done = True
            return NO_OUTPUT
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON in stream event: {e}") from None
        if not isinstance(chunk, dict):
            raise MalformedEvent("stream event is not a JSON object")
        if self._error(chunk):
            return NO_OUTPUT
        if self.response_id is None:
            self._id(chunk)
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        self.chunk_tokens = None
        if not choices:
            if usage:
                self._usage(usage, final=True)
            return NO_OUTPUT
        choice = self._first_choice(choices)
        if usage:
            self._usage(usage, final=False)
        if choice.get("finish_reason"):
            self.done = True
            self.finish_reason = reason(choice.get("finish_reason"))
        if self.texts is not None:
            self._keep(choice, "delta")
        return self._what(choice, "delta")

    def full(self, body: bytes) -> int:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON body: {e}") from None
        if not isinstance(doc, dict):
            raise MalformedEvent("response body is not a JSON object")
        if self._error(doc):
            return NO_OUTPUT
        self._id(doc)
        self.done = True
        self._usage(doc.get("usage"), final=True)
        choices = doc.get("choices")
        if not choices:
            return NO_OUTPUT
        choice = self._first_choice(choices)
        self.finish_reason = reason(choice.get("finish_reason"))
        if self.texts is not None:
            self._keep(choice, "message")
        return self._what(choice, "message")

    def envelope(self, payload: bytes, what: int) -> tuple[bytes, bytes] | None:
        """The shape vLLM / SGLang / OpenAI repeat for every token: the chunk's bytes around the
        one string that carries the text (`delta.content`, `reasoning_content` / `reasoning`, a
        tool call's `arguments`, completions' `text`); id, model, created and the rest stay the same
        through a response.

        Found by locating the text's bytes in the payload, then proven on this parser's own code:
        two probe texts (ASCII, multi-byte) put into the slot must each parse to `what`, leave every
        counter, the id, done, finish reason and error as a fresh parser has them, and be kept as the
        generated text — which only the text fields are, and the only other use of a text field is
        its truthiness (`_what`, keep_message_text), the same for every non-empty string. A slot
        string cannot change the JSON around it (it holds no unescaped quote), so what holds for
        the probes holds for every slot the fast path accepts (base.Parser.envelope).
        """
        if what < OUTPUT or self.error is not None:
            return None
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        for text in _texts_of(doc, self._chat):
            raw = orjson.dumps(text)
            if b"\\" in raw:  # the server escaped something: wait for a plain chunk
                continue
            start = 0
            for _ in range(4):  # the text's first few occurrences (it may also be, say, the model name)
                at = payload.find(raw, start)
                if at < 0:
                    break
                start = at + 1
                prefix, suffix = payload[: at + 1], payload[at + len(raw) - 1:]
                if self._proves(prefix, suffix, what):
                    return prefix, suffix
        return None

    def _proves(self, prefix: bytes, suffix: bytes, what: int) -> bool:
        for probe in _PROBES:
            p = type(self)()
            p.response_id = self.response_id
            p.keep_text()
            try:
                got = p.event(prefix + probe + suffix)
            except MalformedEvent:
                return False
            if (got != what or p.texts != [probe.decode()] or p.response_id != self.response_id
                    or p.chunk_tokens is not None or p.usage_output_tokens is not None
                    or p.continuous_output_tokens is not None or p.prompt_tokens is not None
                    or p.error is not None or p.done or p.finish_reason is not None
                    # a tool call's arguments are kept per call too (base.Parser.calls): not a slot
                    or (self.calls is not None and p.calls)):
                return False
        return True

    def _what(self, choice: dict[str, Any], key: str) -> int:
        """What a choice carried: a streamed `delta` and a whole `message` have the same channels."""
        if self._chat:
            part = choice.get(key)
            if not part:
                return NO_OUTPUT
            if not isinstance(part, dict):
                raise MalformedEvent(f"choices[0].{key} is not an object")
            if part.get("content"):
                return VISIBLE
            if part.get("reasoning_content") or part.get("reasoning"):
                return REASONING
            if part.get("tool_calls"):
                return OUTPUT
            return NO_OUTPUT
        return VISIBLE if choice.get("text") else NO_OUTPUT


# Slot texts that prove an envelope: plain ASCII, and multi-byte UTF-8 with a space.
_PROBES = (b"a", "\u00e9 \u65e5Z".encode())


def _texts_of(doc: Any, chat: bool) -> list[str]:
    """The non-empty strings of a chunk that carry generated text (candidates for the slot)."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        return []
    if not chat:
        return [choice["text"]] if isinstance(choice.get("text"), str) and choice["text"] else []
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return []
    found = [delta[k] for k in ("content", "reasoning_content", "reasoning") if isinstance(delta.get(k), str)]
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                found.append(fn["arguments"])
    return [t for t in found if t]


class _ChatParser(_OpenAIParser):
    __slots__ = ()
    _chat = True


class _CompletionsParser(_OpenAIParser):
    __slots__ = ()
    _chat = False


def _parse_models(body: bytes) -> list[str] | None:
    """`GET /v1/models`: `{"object": "list", "data": [{"id": "name", ...}, ...]}` → the ids."""
    return listed_names(body, "data", "id")


def _image_parts(message: dict[str, Any], images: tuple[ImagePart, ...]) -> dict[str, Any]:
    """A user message with `image_url` content parts after its text (text first: two requests with
    the same images then share no prefix past their different texts)."""
    content = message.get("content")
    parts = list(content) if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    parts += [{"type": "image_url", "image_url": {"url": im.uri()}} for im in images]
    return {**message, "content": parts}


class OpenAIChat:
    name = "openai-chat"
    path = "/v1/chat/completions"
    models_path = "/v1/models"

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        max_tokens = effective_max_tokens(sample, params)
        body = _common_body(params, max_tokens)
        body["messages"] = with_images(sample, _image_parts)
        tools = getattr(sample, "tools", None)  # an agentic session's model call (corpus/agentic.py)
        if tools:
            body["tools"] = tools
            choice = getattr(sample, "tool_choice", None)
            if choice is not None:
                body["tool_choice"] = choice
        headers = dict(_HEADERS)
        headers["Accept"] = "text/event-stream" if params.stream else "application/json"
        return HttpCall("POST", self.path, orjson.dumps(body), headers, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _ChatParser()

    parse_models = staticmethod(_parse_models)


class OpenAICompletions:
    name = "openai-completions"
    path = "/v1/completions"
    models_path = "/v1/models"

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        max_tokens = effective_max_tokens(sample, params)
        body = _common_body(params, max_tokens)
        body["prompt"] = sample.text
        headers = dict(_HEADERS)
        headers["Accept"] = "text/event-stream" if params.stream else "application/json"
        return HttpCall("POST", self.path, orjson.dumps(body), headers, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _CompletionsParser()

    parse_models = staticmethod(_parse_models)
