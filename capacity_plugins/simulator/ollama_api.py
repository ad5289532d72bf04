"""Ollama's native API: POST /api/chat, POST /api/generate, GET /api/tags, GET /api/version.

NDJSON streams (`application/x-ndjson`, one JSON object per line, one line per write):
`{"model":…,"created_at":…,"message":{"role":"assistant","content":" the"},"done":false}` for
/api/chat (`"response":" the"` for /api/generate; reasoning tokens go to `thinking`), then a
final `done: true` line with `done_reason` ("stop" / "length"), `total_duration`,
`load_duration`, `prompt_eval_count`, `prompt_eval_duration`, `eval_count`, `eval_duration`
(nanoseconds). `"stream": false` gives that final object with the whole text. `options.num_predict`
limits output (-1 or absent: `default_max_tokens`). Like Ollama, a prompt longer than the
context is cut, not refused. Errors are `{"error": …}`, also as a line inside a stream.
"""

from __future__ import annotations

import time
from time import perf_counter
from typing import Any

import orjson

from capacity_plugins.simulator.images import ollama_image_units
from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_REPLY,
    prompt_units,
    texts,
)


def _created_at() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"


class OllamaDialect(Dialect):
    name = "ollama"
    content_type = "application/x-ndjson"
    id_prefix = "ollama-"

    def parse(self, kind: str, body: dict[str, Any]) -> Params:
        cfg = self.config
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadRequest("model is required")
        if model != cfg.model and model.split(":")[0] != cfg.model:
            raise BadRequest(f"model '{model}' not found", 404)
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages: a non-empty list of messages is required")
            units: list[str] = []
            for i, msg in enumerate(messages):
                if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                    raise BadRequest(f"messages[{i}]: must be an object with a string 'role'")
                content = msg.get("content", "")
                if not isinstance(content, str):
                    raise BadRequest(f"messages[{i}].content: must be a string")
                units += [f"<|{msg['role']}|>"] + [""] * (CHAT_TOKENS_PER_MESSAGE - 1) + prompt_units(content)
                units += ollama_image_units(msg.get("images"), cfg, i)  # base64 images (simulator/images.py)
            units += ["<|assistant|>"] + [""] * (CHAT_TOKENS_REPLY - 1)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise BadRequest("prompt: must be a string")
            units = prompt_units(prompt)
        stream = body.get("stream", True)
        if not isinstance(stream, bool):
            raise BadRequest("stream: must be a boolean")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise BadRequest("options: must be an object")
        limit = options.get("num_predict", -1)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit == 0 or limit < -2:
            raise BadRequest("options.num_predict: must be a positive integer, or -1 for no limit")
        max_len = cfg.max_model_len
        units = units[-(max_len - 1):]  # Ollama truncates an over-long prompt to the context
        prompt_tokens = max(1, len(units))
        room = max_len - prompt_tokens
        limit = min(cfg.default_max_tokens, room) if limit < 0 else min(limit, room)
        return Params(kind, stream, units, prompt_tokens, max(1, limit))

    def error_body(self, status: int, message: str) -> bytes:
        return orjson.dumps({"error": message})

    def _prefix(self) -> str:
        return f'{{"model":{orjson.dumps(self.config.model).decode()},"created_at":"{_created_at()}"'

    def token_event(self, job: JobView, first: int, upto: int, reasoning: bool, last: bool) -> bytes:
        text = orjson.dumps(texts(first, upto)).decode()
        if job.params.kind == "chat":
            body = (f'"message":{{"role":"assistant","content":"","thinking":{text}}}' if reasoning
                    else f'"message":{{"role":"assistant","content":{text}}}')
        else:
            body = f'"response":"","thinking":{text}' if reasoning else f'"response":{text}'
        return f'{self._prefix()},{body},"done":false}}\n'.encode()

    def _final(self, job: JobView, whole: bool) -> dict[str, Any]:
        seq = job.seq
        now = perf_counter()
        out: dict[str, Any] = {"model": self.config.model, "created_at": _created_at()}
        content = texts(job.reasoning + 1, seq.generated) if whole and seq.generated > job.reasoning else ""
        thinking = texts(1, job.reasoning) if whole and job.reasoning else None
        if job.params.kind == "chat":
            out["message"] = {"role": "assistant", "content": content}
            if thinking:
                out["message"]["thinking"] = thinking
        else:
            out["response"] = content
            if thinking:
                out["thinking"] = thinking
        first = seq.first_token_at or now
        admitted = seq.admitted_at or seq.arrival
        out.update({
            "done": True, "done_reason": "length" if seq.finish_reason == "length" else "stop",
            "total_duration": int((now - seq.arrival) * 1e9), "load_duration": 100_000,
            "prompt_eval_count": job.params.prompt_tokens, "prompt_eval_duration": int((first - admitted) * 1e9),
            "eval_count": seq.generated, "eval_duration": int(((seq.last_token_at or now) - first) * 1e9),
        })
        if job.params.kind == "generate":
            out["context"] = [1, 2, 3]
        return out

    def stream_tail(self, job: JobView) -> list[bytes]:
        return [orjson.dumps(self._final(job, whole=False)) + b"\n"]

    def stream_error(self, job: JobView, message: str) -> list[bytes]:
        return [orjson.dumps({"error": message}) + b"\n"]

    def malformed(self, job: JobView) -> bytes:
        return f'{self._prefix()},"message":{{"role":"assistant","content":" the\n'.encode()

    def full_body(self, job: JobView) -> bytes:
        return orjson.dumps(self._final(job, whole=True))

    def tags_body(self) -> bytes:
        return orjson.dumps({"models": [{
            "name": self.config.model, "model": self.config.model, "modified_at": "2026-01-01T00:00:00Z",
            "size": 1, "digest": "0" * 64,
            "details": {"format": "gguf", "family": "simulated", "parameter_size": "0B",
                        "quantization_level": "none"},
        }]})

