"""Triton Inference Server's generate extension, as served with a TensorRT-LLM or vLLM backend.

Routes (`app` dispatches every `/v2…` path here):
- `POST /v2/models/{model}[/versions/1]/generate`: one JSON object, `application/json`.
- `POST /v2/models/{model}[/versions/1]/generate_stream`: SSE, `text/event-stream; charset=utf-8`,
  one `data: {…}\\n\\n` event per write and no terminator (Triton ends the chunked body).
- `GET /v2/health/ready`, `/v2/health/live`, `/v2/models/{model}[/versions/1]/ready`: 200, empty.
- `GET /v2/models/{model}[/versions/1]`: model metadata (`name`, `versions`, `platform`,
  `inputs`, `outputs`); `GET /v2`: server metadata.

Request: Triton maps each top-level key to an input tensor of the model and `parameters` to
request parameters, so which names mean what is the backend's business. The TensorRT-LLM
ensemble takes `text_input` and `max_tokens` as inputs; the vLLM backend takes `text_input` and
reads sampling settings (`max_tokens`) from `parameters`. The simulator accepts the limit in
either place, under the names `triton_input_field` / `triton_max_tokens_field` configure.
`stream` (top level or in `parameters`) asks the backend to stream: without it both backends
answer generate_stream with a single event carrying the whole text at the end, and so does the
simulator. With it, /generate is refused (Triton: "generate expects model to produce exactly 1
response"; Triton only notices after generating, the simulator refuses at once). `ignore_eos`,
`min_tokens` / `min_length` are honoured where they are found. An `id` is echoed in every event.

Response events: the backend's outputs plus `model_name` / `model_version` (and `id`), keys in
the sorted order Triton's writer emits them: `{"model_name":…,"model_version":"1","text_output":…}`
(`triton_output_field` renames the output). Streamed outputs are deltas, or the whole text so far
with `triton_cumulative` (older vLLM backends; TensorRT-LLM's `accumulate_tokens`). No usage:
Triton reports no token counts. Errors: `{"error": "…"}` with the HTTP status, or inside a
stream `data: {"error":"…"}` and the end of the body.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import prompt_units, texts

MODEL_VERSION = "1"
MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/([a-z_]+))?$")
ONE_RESPONSE_ONLY = ("generate expects model to produce exactly 1 response, use generate stream for model "
                     "that generates various number of responses")
_SORTED = orjson.OPT_SORT_KEYS


def unknown_model(name: str, version: str | None) -> str:
    return f"Request for unknown model: '{name}'" + (f" version {version}" if version else "") + " is not found"


class TritonDialect(Dialect):
    name = "triton"
    content_type = "text/event-stream; charset=utf-8"
    id_prefix = "triton-"
    reasoning_channel = False

    # -- parsing ------------------------------------------------------------------------------
    def parse(self, kind: str, body: dict[str, Any]) -> Params:
        cfg = self.config
        params = body.get("parameters", {})
        if not isinstance(params, dict):
            raise BadRequest("Expected JSON object for keyword: 'parameters'")
        rid = body.get("id")
        if rid is not None and not isinstance(rid, str):
            raise BadRequest("id field must be a string")
        where = f"[request id: {rid or '<id_unknown>'}] "

        def value(name: str) -> Any:
            # An input tensor (top level) wins over a request parameter of the same name.
            found = body[name] if name in body else params.get(name)
            if isinstance(found, list) and len(found) == 1:  # a one-element tensor
                return found[0]
            return found

        def integer(name: str, low: int) -> int | None:
            found = value(name)
            if found is not None and (not isinstance(found, int) or isinstance(found, bool) or found < low):
                raise BadRequest(f"{where}'{name}' must be an integer >= {low}, got {orjson.dumps(found).decode()}")
            return found

        def flag(name: str) -> bool:
            found = value(name)
            if found is not None and not isinstance(found, bool):
                raise BadRequest(f"{where}'{name}' must be a boolean, got {orjson.dumps(found).decode()}")
            return bool(found)

        field = cfg.triton_input_field
        text = value(field)
        if text is None:
            raise BadRequest(f"{where}expected number of inputs between 1 and 3 but got 0 inputs for model "
                             f"'{cfg.model}'. Got input(s) [], but missing required input(s) ['{field}']. "
                             "Please provide all required input(s).")
        if not isinstance(text, str):
            raise BadRequest(f"{where}input '{field}' must be a string (BYTES), got {orjson.dumps(text).decode()}")
        units = prompt_units(text)
        prompt_tokens = max(1, len(units))
        limit = integer(cfg.triton_max_tokens_field, 1)
        min_tokens = integer("min_tokens", 0) or integer("min_length", 0) or 0
        ignore_eos = flag("ignore_eos")
        stream = flag("stream")
        max_len = cfg.max_model_len
        if prompt_tokens >= max_len:
            raise BadRequest(f"{where}Prompt length ({prompt_tokens}) exceeds maximum input length ({max_len - 1}).")
        if limit is None:
            limit = min(cfg.default_max_tokens, max_len - prompt_tokens)
        elif prompt_tokens + limit > max_len:
            raise BadRequest(f"{where}Prompt length ({prompt_tokens}) plus {cfg.triton_max_tokens_field} ({limit}) "
                             f"exceeds the maximum sequence length ({max_len}).")
        if min_tokens > limit:
            raise BadRequest(f"{where}min_tokens ({min_tokens}) must be <= {cfg.triton_max_tokens_field} ({limit})")
        if kind == "generate" and stream:
            raise BadRequest(ONE_RESPONSE_ONLY)
        streamed = kind == "generate_stream"
        return Params(kind, streamed, units, prompt_tokens, limit, min_tokens, ignore_eos,
                      one_event=streamed and not stream, echo_id=rid)

    def error_body(self, status: int, message: str) -> bytes:
        return orjson.dumps({"error": message})

    # -- responses ------------------------------------------------------------------------------
    def _response(self, job: JobView, text: str) -> bytes:
        out = {"model_name": self.config.model, "model_version": MODEL_VERSION, self.config.triton_output_field: text}
        if job.params.echo_id is not None:
            out["id"] = job.params.echo_id
        return orjson.dumps(out, option=_SORTED)

    def token_event(self, job: JobView, first: int, upto: int, reasoning: bool, last: bool) -> bytes:
        # No reasoning channel: a reasoning model's thinking is part of text_output.
        text = texts(1 if self.config.triton_cumulative else first, upto)
        return b"data: " + self._response(job, text) + b"\n\n"

    def stream_tail(self, job: JobView) -> list[bytes]:
        return []

    def stream_error(self, job: JobView, message: str) -> list[bytes]:
        return [b"data: " + self.error_body(500, message) + b"\n\n"]

    def malformed(self, job: JobView) -> bytes:
        return f'data: {{"model_name":{orjson.dumps(self.config.model).decode()},"model_version":"1","'.encode() + \
            self.config.triton_output_field.encode() + b'":" the\n\n'

    def full_body(self, job: JobView) -> bytes:
        return self._response(job, texts(1, job.seq.generated))

    # -- metadata -------------------------------------------------------------------------------
    def model_metadata_body(self) -> bytes:
        cfg = self.config
        return orjson.dumps({
            "name": cfg.model, "versions": [MODEL_VERSION], "platform": "ensemble",
            "inputs": [{"name": cfg.triton_input_field, "datatype": "BYTES", "shape": [-1]},
                       {"name": cfg.triton_max_tokens_field, "datatype": "INT32", "shape": [-1]},
                       {"name": "stream", "datatype": "BOOL", "shape": [-1]}],
            "outputs": [{"name": cfg.triton_output_field, "datatype": "BYTES", "shape": [-1]}],
        })

    def server_metadata_body(self) -> bytes:
        return orjson.dumps({"name": "triton", "version": "2.59.0-sim",
                             "extensions": ["model_configuration", "parameters", "statistics", "generate"]})
