"""Embedding and rerank routes: `/v1/embeddings` (OpenAI, vLLM, llama.cpp), `/embed` (TEI),
`/v1/rerank` (vLLM, Cohere- and Jina-compatible) and `/rerank` (vLLM's alias; TEI's form when the
body has `texts`).

A request is one sequence in the same continuous-batching engine as generation: its prompt is all
its items' tokens (a rerank scores each document with the query, so each item is query + document),
and it needs one engine step: it joins the batch, its prefill takes its tokens /
`prefill_tokens_per_s`, and it finishes at the end of that step. So requests batch together as a
pooling model's do on vLLM, and the closed form of a saturated engine is: each step admits up to
`max_num_seqs` requests and lasts `decode_base_ms + decode_per_seq_ms × n + n × tokens /
prefill_tokens_per_s`, so at saturation (enough requests waiting to fill every slot each step)

    items/s = max_num_seqs × batch_size / (decode_base_ms + decode_per_seq_ms × max_num_seqs
              + max_num_seqs × tokens per request / prefill_tokens_per_s)

(docs/simulator.md). The answers: an 8-float embedding per input, or a relevance score per document,
with `usage.prompt_tokens` (OpenAI / vLLM form; TEI's native forms carry no usage).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import orjson

from capacity_plugins.simulator.openai_api import ERROR_TYPES
from capacity_plugins.simulator.protocol import BadRequest, Dialect, JobView, Params
from capacity_plugins.simulator.tokens import prompt_units

EMBEDDING_DIM = 8
KINDS = ("embeddings", "tei-embed", "rerank")  # the route kinds this module answers


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        return value
    raise BadRequest(f"{name}: must be a string or a non-empty list of strings")


class ItemsDialect(Dialect):
    name = "embeddings"
    content_type = "application/json"
    reasoning_channel = False

    def new_id(self, kind: str) -> str:
        return ("embd-" if kind != "rerank" else "rerank-") + uuid.uuid4().hex

    def parse(self, kind: str, body: dict[str, Any]) -> Params:
        cfg = self.config
        model = body.get("model")
        if model is not None and model != cfg.model:
            raise BadRequest(f"The model `{model}` does not exist.", 404)
        if kind == "embeddings":
            items = _texts(body.get("input"), "input")
            units = [u for t in items for u in prompt_units(t)]
        elif kind == "tei-embed":
            items = _texts(body.get("inputs"), "inputs")
            units = [u for t in items for u in prompt_units(t)]
        else:
            query = body.get("query")
            if not isinstance(query, str) or not query:
                raise BadRequest("query: must be a non-empty string")
            tei = "texts" in body  # TEI's native form; vLLM and Cohere send `documents`
            items = _texts(body.get("texts") if tei else body.get("documents"), "texts" if tei else "documents")
            q = prompt_units(query)
            units = [u for t in items for u in q + prompt_units(t)]  # each pair is scored on its own
            kind = "tei-rerank" if tei else "rerank"
        tokens = max(1, len(units))
        if max(len(prompt_units(t)) for t in items) > cfg.max_model_len:
            raise BadRequest(f"This model's maximum context length is {cfg.max_model_len} tokens; an input is longer.")
        params = Params(kind, False, units, tokens, 1, 0, True)
        params.items = len(items)
        return params

    def error_body(self, status: int, message: str) -> bytes:
        return orjson.dumps({"object": "error", "message": message, "type": ERROR_TYPES.get(status, "Error"),
                             "param": None, "code": status})

    def full_body(self, job: JobView) -> bytes:
        p = job.params
        n = p.items
        if p.kind == "tei-embed":
            return orjson.dumps([_vector(i) for i in range(n)])
        if p.kind == "tei-rerank":
            return orjson.dumps([{"index": i, "score": _score(i)} for i in _ranked(n)])
        usage = {"prompt_tokens": p.prompt_tokens, "total_tokens": p.prompt_tokens}
        if p.kind == "rerank":
            return orjson.dumps({"id": job.id, "model": self.config.model, "usage": usage,
                                 "results": [{"index": i, "document": None, "relevance_score": _score(i)}
                                             for i in _ranked(n)]})
        return orjson.dumps({"id": job.id, "object": "list", "created": job.created, "model": self.config.model,
                             "data": [{"index": i, "object": "embedding", "embedding": _vector(i)} for i in range(n)],
                             "usage": usage})


def _vector(i: int) -> list[float]:
    # a unit vector, different per item: what the client receives costs about what a real one does per dim
    v = [math.sin(i + k) for k in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def _score(i: int) -> float:
    return 1.0 / (1.0 + i)


def _ranked(n: int) -> list[int]:
    return sorted(range(n), key=_score, reverse=True)
