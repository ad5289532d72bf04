"""Text Generation Inference's native API: POST /generate, POST /generate_stream, GET /info.

- /generate: `{"generated_text": …}`, plus `details` (`finish_reason`, `generated_tokens`,
  `seed`, `prefill`, `tokens`) when `parameters.details` is true.
- /generate_stream: SSE as TGI's axum server writes it (`data:` with no space), one event per
  token `{"index":i,"token":{"id":…,"text":…,"logprob":…,"special":false},"generated_text":null,
  "details":null}`; the last token's event carries the whole `generated_text` and `details`
  (`finish_reason` "length" / "eos_token", `generated_tokens`, `seed`, `input_length`). No [DONE].
- errors: `{"error": …, "error_type": …}`; validation errors are 422 like TGI's; an error inside
  a stream is `data:{"error":…,"error_type":"generation"}`.
`parameters.max_new_tokens` limits output (default: `default_max_tokens`); `inputs` tokens +
`max_new_tokens` above `max_model_len` (TGI's max_total_tokens) is a 422.
"""

from __future__ import annotations

from typing import Any

import orjson

from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import TOKEN_TEXTS, output_text, prompt_units, texts

ERROR_TYPES = {400: "validation", 404: "not_found", 405: "validation", 422: "validation", 429: "overloaded",
               500: "generation", 503: "overloaded"}


def _finish(reason: str | None) -> str:
    return "eos_token" if reason == "stop" else (reason or "length")


def _token_id(i: int) -> int:
    return 100 + (i - 1) % len(TOKEN_TEXTS)


class TGIDialect(Dialect):
    name = "tgi"
    content_type = "text/event-stream"
    id_prefix = "tgi-"

    def parse(self, kind: str, body: dict[str, Any]) -> Params:
        cfg = self.config
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            raise BadRequest("Failed to deserialize the JSON body into the target type: missing field `inputs` "
                             "(a string)", 422)
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadRequest("parameters: must be an object", 422)
        units = prompt_units(inputs)
        prompt_tokens = max(1, len(units))
        limit = params.get("max_new_tokens")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise BadRequest("Input validation error: `max_new_tokens` must be strictly positive", 422)
        max_len = cfg.max_model_len
        if prompt_tokens >= max_len:
            raise BadRequest(f"Input validation error: `inputs` must have less than {max_len} tokens. "
                             f"Given: {prompt_tokens}", 422)
        if limit is None:
            limit = min(cfg.default_max_tokens, max_len - prompt_tokens)
        elif prompt_tokens + limit > max_len:
            raise BadRequest(f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= {max_len}. "
                             f"Given: {prompt_tokens} `inputs` tokens and {limit} `max_new_tokens`", 422)
        details = params.get("details", False)
        if not isinstance(details, bool):
            raise BadRequest("parameters.details: must be a boolean", 422)
        stream = kind == "generate_stream" or body.get("stream") is True
        return Params(kind, stream, units, prompt_tokens, limit, details=details)

    def error_body(self, status: int, message: str) -> bytes:
        return orjson.dumps({"error": message, "error_type": ERROR_TYPES.get(status, "generation")})

    def _event(self, job: JobView, i: int, final: bool) -> bytes:
        token = (f'{{"id":{_token_id(i)},"text":{orjson.dumps(output_text(i - 1)).decode()},'
                 f'"logprob":-{0.05 + (i % 7) * 0.1:.2f},"special":false}}')
        if final:
            seq = job.seq
            details = orjson.dumps({"finish_reason": _finish(seq.finish_reason), "generated_tokens": seq.generated,
                                    "seed": None, "input_length": job.params.prompt_tokens}).decode()
            generated = orjson.dumps(texts(1, seq.generated)).decode()
            return (f'data:{{"index":{i},"token":{token},"generated_text":{generated},'
                    f'"details":{details}}}\n\n').encode()
        return f'data:{{"index":{i},"token":{token},"generated_text":null,"details":null}}\n\n'.encode()

    def token_event(self, job: JobView, first: int, upto: int, reasoning: bool, last: bool) -> bytes:
        if first == upto:
            return self._event(job, upto, last)
        return b"".join(self._event(job, i, last and i == upto) for i in range(first, upto + 1))

    def stream_tail(self, job: JobView) -> list[bytes]:
        return []

    def stream_error(self, job: JobView, message: str) -> list[bytes]:
        return [b"data:" + orjson.dumps({"error": message, "error_type": "generation"}) + b"\n\n"]

    def malformed(self, job: JobView) -> bytes:
        return b'data:{"index":1,"token":{"id":\n\n'

    def full_body(self, job: JobView) -> bytes:
        seq = job.seq
        out: dict[str, Any] = {"generated_text": texts(1, seq.generated)}
        if job.params.details:
            out["details"] = {
                "finish_reason": _finish(seq.finish_reason), "generated_tokens": seq.generated, "seed": None,
                "prefill": [], "tokens": [{"id": _token_id(i), "text": output_text(i - 1), "logprob": -0.1,
                                           "special": False} for i in range(1, seq.generated + 1)],
            }
        return orjson.dumps(out)

    def info_body(self) -> bytes:
        cfg = self.config
        return orjson.dumps({
            "model_id": cfg.model, "model_sha": None, "model_dtype": "torch.float16", "model_device_type": "cuda",
            "model_pipeline_tag": "text-generation", "max_concurrent_requests": 128, "max_best_of": 2,
            "max_stop_sequences": 4, "max_input_tokens": cfg.max_model_len - 1,
            "max_total_tokens": cfg.max_model_len, "validation_workers": 2, "max_client_batch_size": 4,
            "router": "text-generation-router", "version": "3.0.0-sim", "sha": None, "docker_label": None,
        })
