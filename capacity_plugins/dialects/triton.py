"""Triton Inference Server's generate extension: /v2/models/{model}/generate_stream (SSE) and /generate.

Request: the prompt under the model's input name (`text_input` for the TensorRT-LLM ensemble and
the vLLM backend) and the sampling settings either as top-level keys or in `parameters`. Triton
maps both alike: a key naming one of the model's inputs becomes that tensor (TensorRT-LLM's
`max_tokens`, `stream`), any other key a request parameter (the vLLM backend reads its sampling
parameters there). Both backends stream token by token only when the body says `stream: true`;
without it generate_stream answers one event at the end. `exclude_input_in_output: true` on a
non-streamed request keeps the prompt out of the answer (both backends echo it by default there).
No `min_length` or other backend-only name is sent: the vLLM backend passes every request
parameter to vLLM's SamplingParams, which rejects names it does not know.

Response: one JSON object per event, `{"model_name", "model_version", "text_output"}`; a one-element
output tensor is a plain value, a longer one a list (the first sequence is the one measured).
No usage: Triton reports no token counts, so the count falls back to chunks or `--tokenizer`
(docs/metrics.md). The vLLM backend adds `finish_reason` when asked (`"None"` until the last
response). Errors are `{"error": "..."}`, as the body or as an event of a 200 stream.

Triton ends a stream by ending the chunked body; there is no last event. A body cut before its end
raises in the reader (`stream_cut`), so every well-formed event leaves `done` set.

Outputs are deltas (the vLLM backend, TensorRT-LLM by default) or, with older vLLM backends and
TensorRT-LLM's `accumulate_tokens`, the whole text so far. `outputs: auto` tells them apart:
a cumulative stream starts every event with the previous event's text, and a delta stream does
not for long. What the two readings disagree on is only an event whose text adds nothing to the
previous one (equal to it, or a prefix of it): cumulative, it carries no output; as a delta it is
a repeated piece. `_OutputMode` keeps what was learned for every later request of the run.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import orjson

from capacity_plugins.contracts.dialects import TRITON_GENERATE, TritonFields
from capacity_plugins.dialects.base import (
    NO_OUTPUT,
    VISIBLE,
    HttpCall,
    MalformedEvent,
    Parser,
    RequestParams,
    SampleLike,
    effective_max_tokens,
    error_text,
    is_error_payload,
    json_object,
    reason,
)

log = logging.getLogger(__name__)

# Consecutive events that each extend the previous one, from a stream's start, that make it cumulative.
CONFIRM_CUMULATIVE = 3
# Events in one stream that neither extend nor repeat the previous one, that make it deltas.
CONFIRM_DELTA = 2


class _OutputMode:
    """Whether this run's server streams cumulative outputs: fixed by the user, or learned once
    from the first stream that shows it, then used by every parser of the dialect instance."""

    __slots__ = ("cumulative",)

    def __init__(self, outputs: str) -> None:
        self.cumulative: bool | None = {"delta": False, "cumulative": True}.get(outputs)

    def learn(self, cumulative: bool) -> None:
        if self.cumulative is None:
            self.cumulative = cumulative
            log.info("triton-generate: streamed outputs are %s (detected)", "cumulative" if cumulative else "deltas")


def _doc(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise MalformedEvent(f"invalid JSON {what}: {e}") from None
    if not isinstance(doc, dict):
        raise MalformedEvent(f"{what} is not a JSON object")
    return doc


def _first(value: Any) -> Any:
    """A one-element tensor arrives as its value, a longer one as a list: its first element."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


class _TritonParser(Parser):
    __slots__ = ("_output", "_mode", "_cumulative", "_last", "_extended", "_broken")

    def __init__(self, output_field: str, mode: _OutputMode) -> None:
        super().__init__()
        self._output = output_field
        self._mode = mode
        self._cumulative = mode.cumulative  # None: this stream has not shown which yet
        self._last = ""  # the previous event's text (cumulative: everything so far)
        self._extended = 0  # events that extended the previous one, while undecided
        self._broken = 0  # events that did not, while undecided

    def _common(self, doc: dict[str, Any]) -> str | None:
        """The generated text of one response object, after its error and metadata; None for an error."""
        if is_error_payload(doc):
            self.error = error_text(doc)
            return None
        rid = doc.get("id")
        if isinstance(rid, str) and rid:
            self.response_id = rid
        finish = _first(doc.get("finish_reason"))
        if finish != "None":  # the vLLM backend's str(None): not finished yet
            self.finish_reason = reason(finish) or self.finish_reason
        if self._output not in doc:
            raise MalformedEvent(f"no {self._output!r} in the response (the model's output name: --triton-output-field)")
        text = _first(doc[self._output])
        if text is None:
            return ""
        if not isinstance(text, str):
            raise MalformedEvent(f"{self._output!r} is not a string")
        return text

    def event(self, data: bytes) -> int:
        text = self._common(_doc(data, "stream event"))
        if text is None:
            return NO_OUTPUT
        self.done = True  # no end event in Triton's streams (module docstring)
        if not text:
            return NO_OUTPUT
        last = self._last
        self._last = text
        cumulative = self._cumulative
        if cumulative is None:
            cumulative = self._observe(text, last)
        if self.texts is not None and self._cumulative is not True:
            self.texts.append(text)  # as a delta: kept until the stream shows it is not one
        if cumulative and (text == last or last.startswith(text)):
            return NO_OUTPUT  # the whole text so far again (or re-decoded shorter): nothing new
        return VISIBLE

    def _observe(self, text: str, last: str) -> bool:
        """Weigh one event of a stream not yet known to be cumulative; whether to read it as such."""
        if last and len(text) > len(last) and text.startswith(last):
            self._extended += 1
            if self._extended >= CONFIRM_CUMULATIVE and not self._broken:
                self._decide(True)
        elif last and not (text == last or last.startswith(text)):
            self._broken += 1
            if self._broken >= CONFIRM_DELTA:
                self._decide(False)
        return self._extended > self._broken

    def _decide(self, cumulative: bool) -> None:
        self._cumulative = cumulative
        self._mode.learn(cumulative)
        if cumulative and self.texts is not None:
            self.texts = []  # the last event holds the whole text now

    def generated_text(self) -> str | None:
        if self.texts is None:
            return None
        cumulative = self._cumulative
        if cumulative is None:
            cumulative = self._extended > self._broken
        return self._last if cumulative else "".join(self.texts)

    def full(self, body: bytes) -> int:
        text = self._common(_doc(body, "response body"))
        if text is None:
            return NO_OUTPUT
        self.done = True
        if self.texts is not None:
            self.texts.append(text)
        return VISIBLE if text else NO_OUTPUT


class TritonGenerate:
    name = TRITON_GENERATE
    # Triton has no listing of what it serves (the repository index is an extension, often
    # restricted, and lists every step of an ensemble too): the named model's metadata answers
    # whether it is served, and 404s when it is not. `{model}` is filled in (URL-quoted).
    models_path = "/v2/models/{model}"
    ready_path = "/v2/health/ready"  # checked first by the preflight: 200 once every model is loaded

    def __init__(self, fields: TritonFields | None = None) -> None:
        self.fields = fields or TritonFields()
        self._mode = _OutputMode(self.fields.outputs)

    @staticmethod
    def parse_models(body: bytes) -> list[str] | None:
        """`GET /v2/models/{model}`: `{"name": "ensemble", "versions": ["1"], "platform": ...,
        "inputs": [...], "outputs": [...]}` → [name]."""
        doc = json_object(body)
        if doc is None or not isinstance(doc.get("inputs"), list):
            return None
        name = doc.get("name")
        return [name] if isinstance(name, str) and name else None

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        f = self.fields
        max_tokens = effective_max_tokens(sample, params)
        settings: dict[str, Any] = {}
        if max_tokens is not None:
            settings[f.max_tokens_field] = max_tokens
        if params.temperature is not None:
            settings["temperature"] = params.temperature
        if params.top_p is not None:
            settings["top_p"] = params.top_p
        if params.ignore_eos:
            # vLLM's sampling parameters; TensorRT-LLM has no such input (it would need end_id)
            settings["ignore_eos"] = True
            if max_tokens is not None:
                settings["min_tokens"] = max_tokens
        if params.stream:
            settings["stream"] = True  # without it both backends answer one event at the end
        else:
            settings["exclude_input_in_output"] = True
        body: dict[str, Any] = {f.input_field: sample.text}
        if f.params_in == "parameters":
            body["parameters"] = settings
        else:
            body.update(settings)
        action = "generate_stream" if params.stream else "generate"
        path = f"/v2/models/{quote(params.model, safe='')}/{action}"
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if params.stream else "application/json",
        }
        return HttpCall("POST", path, orjson.dumps(body), headers, max_tokens)

    def parser(self, stream: bool) -> Parser:
        return _TritonParser(self.fields.output_field, self._mode)
