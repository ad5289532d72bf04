"""OpenAI-compatible API as vLLM serves it: /v1/chat/completions, /v1/completions, /v1/models.

Framing follows vLLM's serving_chat / serving_completion:
- chat stream: a role-only chunk (`{"role":"assistant","content":""}`) written with the first
  token, then one chunk per token (`delta.content`, or `delta.reasoning_content` — `reasoning`
  with `reasoning_field` — for the first `reasoning_tokens`, or a count drawn up to
  `reasoning_tokens_max`; `reasoning_usage` adds OpenAI's
  `usage.completion_tokens_details.reasoning_tokens`); the last token's chunk carries `finish_reason` ("length" / "stop") and
  `stop_reason: null`; with `stream_options.include_usage` a final chunk with `"choices": []` and
  `usage`; then `data: [DONE]`. `stream_options.continuous_usage_stats` adds `usage` (tokens so
  far) to every chunk. Every chunk, and the non-streamed body, carries the same `id`. With
  `no_usage` both stream options are accepted and ignored (llama.cpp-like): a stream then never
  reports usage, while a whole body still does.
- completions: the same without the role chunk, `choices[0].text`, id `cmpl-…`; default
  max_tokens 16 (vLLM's and OpenAI's default for this endpoint).
- tool calls (an agentic session's model call, corpus/agentic.py): with `tools` and a
  `tool_choice` naming one of them the answer calls that tool; with `tool_choice: "required"` it
  calls every offered tool, in order (a real model chooses; the simulator follows the script the
  client sends). The output tokens are then the calls' arguments, split evenly between the calls,
  streamed as vLLM streams them: a call's first chunk `delta.tool_calls[{index, id, type,
  function: {name, arguments}}]`, the rest `{index, function: {arguments}}`; the arguments
  together are the JSON `{"input": "<the tokens' words>"}`; finish_reason `tool_calls`. An
  assistant message's tool calls (name and arguments) count in a later prompt, so the prefix
  cache sees the whole history a session grows.
- errors: `{"object":"error","message":…,"type":"BadRequestError","param":null,"code":400}`;
  inside a stream `data: {"error": {…}}` then `data: [DONE]`.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.images import openai_image_units
from capacity_plugins.simulator.lora import adapter_names
from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_REPLY,
    output_text,
    prompt_units,
    texts,
)

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed", 429: "TooManyRequests",
               500: "InternalServerError", 503: "ServiceUnavailableError"}


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


class OpenAIDialect(Dialect):
    name = "openai"
    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.adapters = frozenset(adapter_names(config))

    def new_id(self, kind: str) -> str:
        return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex

    # -- parsing ------------------------------------------------------------------------------
    def parse(self, kind: str, body: dict[str, Any]) -> Params:
        cfg = self.config
        model = body.get("model")
        adapter = model if model in self.adapters else None  # a LoRA adapter (simulator/lora.py)
        if model is not None and model != cfg.model and adapter is None:
            raise BadRequest(f"The model `{model}` does not exist.", 404)
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages: Field required (a non-empty list of messages)")
            units: list[str] = []
            for i, msg in enumerate(messages):
                if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                    raise BadRequest(f"messages[{i}]: must be an object with a string 'role'")
                units += [f"<|{msg['role']}|>"] + [""] * (CHAT_TOKENS_PER_MESSAGE - 1)
                units += prompt_units(_content_text(msg.get("content"), i))
                units += _tool_call_units(msg.get("tool_calls"), i)
                units += openai_image_units(msg.get("content"), cfg, i)  # image_url parts (simulator/images.py)
            units += ["<|assistant|>"] + [""] * (CHAT_TOKENS_REPLY - 1)
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            limit_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            what = "messages"
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                units = prompt_units(prompt)
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                units = [str(t) for t in prompt]
            else:
                raise BadRequest("prompt: Field required (a string, or a list of token ids; one prompt per request)")
            limit = body.get("max_tokens", 16)
            limit_name = "max_tokens"
            what = "prompt"
        prompt_tokens = max(1, len(units))
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise BadRequest(f"{limit_name}: must be an integer >= 1, got {_json(limit)}")
        for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
            value = body.get(name)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise BadRequest(f"{name}: Input should be a valid number, got {_json(value)}")
        n = body.get("n", 1)
        if n not in (1, None):
            raise BadRequest("n: the simulator generates one choice per request (n=1)")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest(f"stream: Input should be a valid boolean, got {_json(stream)}")
        opts = body.get("stream_options")
        if opts is not None:
            if not stream:
                raise BadRequest("Stream options can only be defined when `stream=True`.")
            if not isinstance(opts, dict):
                raise BadRequest("stream_options: Input should be a valid dictionary")
        opts = opts or {}
        ignore_eos = body.get("ignore_eos", False)
        min_tokens = body.get("min_tokens", 0)
        if not isinstance(ignore_eos, bool):
            raise BadRequest(f"ignore_eos: Input should be a valid boolean, got {_json(ignore_eos)}")
        if not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or min_tokens < 0:
            raise BadRequest(f"min_tokens: must be an integer >= 0, got {_json(min_tokens)}")
        max_len = cfg.max_model_len
        if prompt_tokens > max_len:
            raise BadRequest(f"This model's maximum context length is {max_len} tokens. However, your request has "
                             f"{prompt_tokens} input tokens. Please reduce the length of the input {what}.")
        if limit is None:
            limit = min(cfg.default_max_tokens, max_len - prompt_tokens)
        elif prompt_tokens + limit > max_len:
            raise BadRequest(f"This model's maximum context length is {max_len} tokens. However, you requested "
                             f"{prompt_tokens + limit} tokens ({prompt_tokens} in the {what}, {limit} in the "
                             f"completion). Please reduce the length of the {what} or completion.")
        if min_tokens > limit:
            raise BadRequest(f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({limit})")
        limit = max(1, limit)
        usage = not cfg.no_usage  # no_usage: like llama.cpp, stream_options are accepted and ignored
        params = Params(kind, stream, units, prompt_tokens, limit, min_tokens, ignore_eos,
                        include_usage=usage and bool(opts.get("include_usage")),
                        continuous_usage=usage and bool(opts.get("continuous_usage_stats")))
        params.adapter = adapter
        if kind == "chat":
            params.tool_calls = _called_tools(body.get("tools"), body.get("tool_choice"))
        return params

    def error_body(self, status: int, message: str) -> bytes:
        return orjson.dumps({"object": "error", "message": message, "type": ERROR_TYPES.get(status, "Error"),
                             "param": None, "code": status})

    # -- streaming ------------------------------------------------------------------------------
    def _prefix(self, job: JobView) -> str:
        obj = "chat.completion.chunk" if job.params.kind == "chat" else "text_completion"
        return f'{{"id":"{job.id}","object":"{obj}","created":{job.created},"model":{_json(job.params.adapter or self.config.model)}'

    def _usage(self, job: JobView, completion: int) -> str:
        p = job.params.prompt_tokens
        details = ""
        if self.config.reasoning_usage:  # OpenAI's form: how many of the completion tokens were thinking
            details = f',"completion_tokens_details":{{"reasoning_tokens":{min(job.reasoning, completion)}}}'
        return (f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + completion},"completion_tokens":{completion}'
                f'{details}}}')

    def stream_head(self, job: JobView) -> list[bytes]:
        if job.params.kind != "chat":
            return []
        usage = "," + self._usage(job, 0) if job.params.continuous_usage else ""
        return [(f'data: {self._prefix(job)},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
                 f'"logprobs":null,"finish_reason":null}}]{usage}}}\n\n').encode()]

    def token_event(self, job: JobView, first: int, upto: int, reasoning: bool, last: bool) -> bytes:
        text = texts(first, upto)
        finish = f'"finish_reason":"{job.seq.finish_reason}","stop_reason":null' if last else '"finish_reason":null'
        calls = job.params.tool_calls
        if calls and not reasoning:
            reason = "tool_calls" if job.seq.finish_reason in ("stop", "length") else job.seq.finish_reason
            finish = f'"finish_reason":"{reason}","stop_reason":null' if last else '"finish_reason":null'
            deltas = _json(_tool_deltas(job, first, upto))
            choice = f'{{"index":0,"delta":{{"tool_calls":{deltas}}},"logprobs":null,{finish}}}'
        elif job.params.kind == "chat":
            key = self.config.reasoning_field if reasoning else "content"
            choice = f'{{"index":0,"delta":{{"{key}":{_json(text)}}},"logprobs":null,{finish}}}'
        else:
            stop = "" if last else ',"stop_reason":null'
            choice = f'{{"index":0,"text":{_json(text)},"logprobs":null,{finish}{stop}}}'
        usage = "," + self._usage(job, upto) if job.params.continuous_usage else ""
        return f"data: {self._prefix(job)},\"choices\":[{choice}]{usage}}}\n\n".encode()

    def stream_tail(self, job: JobView) -> list[bytes]:
        events = []
        if job.params.include_usage:
            events.append(f'data: {self._prefix(job)},"choices":[],{self._usage(job, job.seq.generated)}}}\n\n'.encode())
        events.append(b"data: [DONE]\n\n")
        return events

    def stream_error(self, job: JobView, message: str) -> list[bytes]:
        return [b'data: {"error": %b}\n\n' % self.error_body(500, message), b"data: [DONE]\n\n"]

    def malformed(self, job: JobView) -> bytes:
        return f'data: {self._prefix(job)},"choices":[{{"index":0,"delta":{{"content":" the\n\n'.encode()

    # -- whole responses ------------------------------------------------------------------------
    def full_body(self, job: JobView) -> bytes:
        seq = job.seq
        reasoning = "".join(output_text(i) for i in range(min(job.reasoning, seq.generated))) or None
        content: str | None = "".join(output_text(i) for i in range(job.reasoning, seq.generated))
        p, c = job.params.prompt_tokens, seq.generated
        usage: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c,
                                 "prompt_tokens_details": None}
        if self.config.reasoning_usage:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(job.reasoning, c)}
        if job.params.kind == "chat":
            calls: list[dict[str, Any]] = []
            finish = seq.finish_reason
            if job.params.tool_calls and seq.generated > job.reasoning:  # the output is the calls' arguments
                calls = [{k: v for k, v in call.items() if k != "index"}  # a whole message's calls have no index
                         for call in _tool_deltas(job, job.reasoning + 1, seq.generated)]
                content, finish = None, "tool_calls" if finish in ("stop", "length") else finish
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", self.config.reasoning_field: reasoning, "content": content,
                            "tool_calls": calls},
                "logprobs": None, "finish_reason": finish, "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": (reasoning or "") + (content or ""), "logprobs": None,
                      "finish_reason": seq.finish_reason, "stop_reason": None, "prompt_logprobs": None}
            obj = "text_completion"
        return orjson.dumps({"id": job.id, "object": obj, "created": job.created, "model": job.params.adapter or self.config.model,
                             "choices": [choice], "usage": usage})

    def models_body(self) -> bytes:
        cfg = self.config
        base = {"id": cfg.model, "object": "model", "created": 0, "owned_by": "vllm", "root": cfg.model,
                "parent": None, "max_model_len": cfg.max_model_len, "permission": []}
        # vLLM lists each LoRA adapter as a model whose parent is the base model
        adapters = [{**base, "id": name, "root": f"/adapters/{name}", "parent": cfg.model}
                    for name in adapter_names(cfg)]
        return orjson.dumps({"object": "list", "data": [base, *adapters]})


def _called_tools(tools: Any, choice: Any) -> list[str]:
    """The tools an answer calls: the one a `tool_choice` names, every offered one with `required`,
    none otherwise (`auto`, `none`, absent: the simulator answers in text)."""
    if not isinstance(tools, list) or not tools:
        return []
    names = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise BadRequest(f"tools[{i}].function.name: Field required")
        names.append(fn["name"])
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in names:
            raise BadRequest(f"tool_choice: the named function {_json(name)} is not in tools")
        return [str(name)]
    return names if choice == "required" else []


def _call_of(job: JobView, i: int) -> int:
    """Which tool call output token i (1-based, after any reasoning) belongs to: an even split."""
    n = len(job.params.tool_calls)
    span = max(1, job.params.max_tokens - job.reasoning)
    return min(n - 1, (i - job.reasoning - 1) * n // span)


def _call_id(job: JobView, j: int) -> str:
    return f"chatcmpl-tool-{job.id[-12:]}{j}"


def _tool_deltas(job: JobView, first: int, upto: int) -> list[dict[str, Any]]:
    """The `delta.tool_calls` of output tokens first..upto: one entry per call they touch; a call's
    first token names it, its arguments open with `{"input": "` and its last closes them."""
    out: list[dict[str, Any]] = []
    last_generated = job.seq.generated if job.seq.state == "done" else -1
    for i in range(first, upto + 1):
        j = _call_of(job, i)
        starts = i == job.reasoning + 1 or _call_of(job, i - 1) != j
        ends = i == last_generated or (i < job.params.max_tokens and _call_of(job, i + 1) != j) \
            or i == job.params.max_tokens
        piece = ('{"input": "' if starts else "") + output_text(i - 1) + ('"}' if ends else "")
        if out and out[-1]["index"] == j:
            out[-1]["function"]["arguments"] += piece
        elif starts:
            out.append({"index": j, "id": _call_id(job, j), "type": "function",
                        "function": {"name": job.params.tool_calls[j], "arguments": piece}})
        else:
            out.append({"index": j, "function": {"arguments": piece}})
    return out


def _tool_call_units(calls: Any, i: int) -> list[str]:
    """An assistant message's tool calls as prompt units: each call's name and arguments."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise BadRequest(f"messages[{i}].tool_calls: must be a list")
    units: list[str] = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise BadRequest(f"messages[{i}].tool_calls[{j}].function: Field required")
        args = fn.get("arguments")
        units += prompt_units(str(fn.get("name") or "")) + prompt_units(args if isinstance(args, str) else _json(args))
    return units


def _content_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise BadRequest(f"messages[{i}].content[{j}]: must be an object with a 'type'")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise BadRequest(f"messages[{i}].content[{j}].text: must be a string")
                parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(f"messages[{i}].content: must be a string or a list of content parts")
