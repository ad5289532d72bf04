"""Embedding and rerank APIs: requests that return one answer per input item, not a stream of tokens.

- `openai-embeddings`: `POST /v1/embeddings` `{"model", "input": [texts]}` → `{"data": [{"embedding":
  [...]}, ...], "usage": {"prompt_tokens"}}` — OpenAI, vLLM, llama.cpp's server (`--embedding`) and
  TEI's OpenAI route all answer this form.
- `tei-embed`: TEI's native `POST /embed` `{"inputs": [texts]}` → `[[...], ...]` (no usage).
- `rerank`: `POST /v1/rerank` `{"model", "query", "documents": [texts]}` → `{"results": [{"index",
  "relevance_score"}], "usage": {"total_tokens"}}` — vLLM (also at `/rerank`), Jina- and
  Cohere-compatible servers.
- `tei-rerank`: TEI's native `POST /rerank` `{"query", "texts": [texts]}` → `[{"index", "score"}]`.

A request carries `batch_size` items (`request.batch_size`): the sample's text, each copy
starting with its index (`"3: …"`), so no two items of a request are the same text and a prefix
cache cannot serve one from another; the input length is the corpus's (`synthetic:prompt_tokens=N`).
A rerank's query is the text's first 16 words. Nothing streams: the latency is the whole answer
(E2E), the record's `prompt_tokens` is the server's input count when it says one, and the
analysis counts `batch_size` items per successful request (analysis/items.py). An answer that is
not the API's list of items (or an empty one) is `malformed`.
"""

from __future__ import annotations

from typing import Any

import orjson

from capacity_plugins.dialects.base import (
    NO_OUTPUT,
    HttpCall,
    MalformedEvent,
    Parser,
    RequestParams,
    SampleLike,
    count,
    error_text,
    is_error_payload,
    listed_names,
)

_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
QUERY_WORDS = 16


def batch_texts(sample: SampleLike, n: int) -> list[str]:
    """The request's items (module doc): n copies of the sample's text, each starting with its index."""
    text = sample.text
    return [f"{i}: {text}" for i in range(max(1, n))]


def _query(sample: SampleLike) -> str:
    return " ".join(sample.text.split()[:QUERY_WORDS]) or "query"


class _ItemsParser(Parser):
    """A whole JSON answer with one entry per item; the subclass says where the entries and counts are."""

    __slots__ = ()
    framing = "ndjson"  # never streamed (the scenario refuses stream: true); a line would be one answer

    def event(self, data: bytes) -> int:
        return self.full(data)  # never streamed: a body that arrives in pieces is still one answer

    def full(self, body: bytes) -> int:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise MalformedEvent(f"invalid JSON in the answer: {e}") from None
        if isinstance(doc, dict) and is_error_payload(doc):
            self.error = error_text(doc)
            self.done = True
            return NO_OUTPUT
        items = self.items(doc)
        if not items:
            raise MalformedEvent(f"the answer is not a {self.shape}, or it is empty")
        self.done = True
        if isinstance(doc, dict):
            usage = doc.get("usage")
            if isinstance(usage, dict):
                tokens = count(usage.get("prompt_tokens"))
                self.prompt_tokens = tokens if tokens is not None else count(usage.get("total_tokens"))
            rid = doc.get("id")
            if isinstance(rid, str) and rid:
                self.response_id = rid[:128]
        return NO_OUTPUT

    shape = "list of items"

    def items(self, doc: Any) -> list[Any] | None:
        raise NotImplementedError


class _OpenAIEmbeddingsParser(_ItemsParser):
    __slots__ = ()
    shape = "embeddings list ({\"data\": [{\"embedding\": [...]}, ...]})"

    def items(self, doc: Any) -> list[Any] | None:
        data = doc.get("data") if isinstance(doc, dict) else None
        if isinstance(data, list) and all(isinstance(d, dict) and isinstance(d.get("embedding"), (list, str))
                                          for d in data):
            return data
        return None


class _TEIEmbedParser(_ItemsParser):
    __slots__ = ()
    shape = "list of embeddings ([[...], ...])"

    def items(self, doc: Any) -> list[Any] | None:
        return doc if isinstance(doc, list) and all(isinstance(d, list) for d in doc) else None


class _RerankParser(_ItemsParser):
    __slots__ = ()
    shape = "rerank answer ({\"results\": [{\"index\", \"relevance_score\"}, ...]} or [{\"index\", \"score\"}, ...])"

    def items(self, doc: Any) -> list[Any] | None:
        results = doc.get("results") if isinstance(doc, dict) else doc  # vLLM / Cohere, or TEI's bare list
        if isinstance(results, list) and all(isinstance(r, dict) and type(r.get("index")) is int for r in results):
            return results
        return None


def _openai_embeddings(sample: SampleLike, params: RequestParams) -> dict[str, Any]:
    return {"model": params.model, "input": batch_texts(sample, params.batch_size)}


def _tei_embed(sample: SampleLike, params: RequestParams) -> dict[str, Any]:
    return {"inputs": batch_texts(sample, params.batch_size)}


def _rerank(sample: SampleLike, params: RequestParams) -> dict[str, Any]:
    return {"model": params.model, "query": _query(sample), "documents": batch_texts(sample, params.batch_size)}


def _tei_rerank(sample: SampleLike, params: RequestParams) -> dict[str, Any]:
    return {"query": _query(sample), "texts": batch_texts(sample, params.batch_size)}


class _ItemsDialect:
    """One of the APIs of the module doc: its path, its body and its answer's parser."""

    name = ""
    path = ""
    models_path: str | None = "/v1/models"  # None: TEI's native routes (/info names one model, every request goes to it)
    _parser: type[_ItemsParser] = _OpenAIEmbeddingsParser

    @staticmethod
    def body(sample: SampleLike, params: RequestParams) -> dict[str, Any]:
        raise NotImplementedError

    def build(self, sample: SampleLike, params: RequestParams) -> HttpCall:
        return HttpCall("POST", self.path, orjson.dumps(self.body(sample, params)), dict(_HEADERS), None)

    def parser(self, stream: bool) -> Parser:
        return self._parser()

    def parse_models(self, body: bytes) -> list[str] | None:
        return listed_names(body, "data", "id") if self.models_path is not None else None


class OpenAIEmbeddings(_ItemsDialect):
    name, path = "openai-embeddings", "/v1/embeddings"
    body = staticmethod(_openai_embeddings)


class TEIEmbed(_ItemsDialect):
    name, path, models_path = "tei-embed", "/embed", None
    _parser = _TEIEmbedParser
    body = staticmethod(_tei_embed)


class Rerank(_ItemsDialect):
    name, path = "rerank", "/v1/rerank"
    _parser = _RerankParser
    body = staticmethod(_rerank)


class TEIRerank(_ItemsDialect):
    name, path, models_path = "tei-rerank", "/rerank", None
    _parser = _RerankParser
    body = staticmethod(_tei_rerank)
