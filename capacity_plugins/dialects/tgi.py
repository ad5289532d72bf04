"""Hugging Face Text Generation Inference native API: /generate_stream (SSE) and /generate.

Each stream event carries one token object (`token.text`, `token.special`); the last event also
has `generated_text` and `details.generated_tokens` (asked for with `parameters.details`). A
special token (EOS) is generated output but not visible text. TGI has no response id.
"""

from __future__ import annotations

from typing import Any

import orjson

from capacity_plugins.dialects.base import (
    NO_OUTPUT,
    OUTPUT,
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
    json_object,
    reason,
)


class _TGIParser(Parser):
    __slots__ = ()

    def _details(self, doc: dict[str, Any]) -> None:
        details = doc.get("details")
        if isinstance(details, dict):
            self.done = True
            self.finish_reason = reason(details.get("finish_reason"))
            generated = count(details.get("generated_tokens"))
            if generated is not None:
                self.usage_output_tokens = generated
            prefill = details.get("prefill")
            if isinstance(prefill, list) and prefill:
                self.prompt_tokens = len(prefill)
        elif doc.get("generated_text") is not None:
            self.done = True

    def event(self, data: bytes) -> int:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON in stream event: {e}") from None
        if not isinstance(doc, dict):
            raise MalformedEvent("stream event is not a JSON object")
        if is_error_payload(doc):
            self.error = error_text(doc)
            return NO_OUTPUT
        self._details(doc)
        token = doc.get("token")
        if not isinstance(token, dict):
            return NO_OUTPUT
        self.chunk_tokens = 1
        text = token.get("text")
        if text and not token.get("special"):
            # special tokens (EOS) are not text: generated_text omits them
            if self.texts is not None and isinstance(text, str):
                self.texts.append(text)
            return VISIBLE
        return OUTPUT

    def full(self, body: bytes) -> int:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON body: {e}") from None
        if isinstance(doc, list) and doc:  # /generate may answer a one-element list
            doc = doc[0]
        if not isinstance(doc, dict):
            raise MalformedEvent("response body is not a JSON object")
        if is_error_payload(doc):
            self.error = error_text(doc)
            return NO_OUTPUT
        self._details(doc)
        self.done = True
        if self.texts is not None and isinstance(doc.get("generated_text"), str):
            self.texts.append(doc["generated_text"])
        return VISIBLE if doc.get("generated_text") else NO_OUTPUT


class TGI:
    name = "tgi"
    models_path = "/info"  # TGI serves one model; /info names it

    @staticmethod
    def parse_models(body: bytes) -> list[str] | None:
        """`GET /info`: `{"model_id": "org/name", "version": ..., ...}` → [model_id]."""
        doc = json_object(body)
        model_id = doc.get("model_id") if doc is not None else None
        return [model_id] if isinstance(model_id, str) and model_id else None

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        max_tokens = effective_max_tokens(sample, params)
        parameters: dict[str, Any] = {"details": True}
        if max_tokens is not None:
            parameters["max_new_tokens"] = max_tokens
        # TGI rejects temperature 0 (must be > 0): greedy is `do_sample: false` there
        if params.temperature:
            parameters["temperature"] = params.temperature
            parameters["do_sample"] = True
        elif params.temperature == 0:
            parameters["do_sample"] = False
        if params.top_p is not None and 0 < params.top_p < 1:
            parameters["top_p"] = params.top_p
        body = {"inputs": sample.text, "parameters": parameters}
        path = "/generate_stream" if params.stream else "/generate"
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if params.stream else "application/json",
        }
        return HttpCall("POST", path, orjson.dumps(body), headers, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _TGIParser()
