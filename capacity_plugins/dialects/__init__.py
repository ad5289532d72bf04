"""API dialects: one module per server API, no Locust import (see base.py for the contract)."""

from __future__ import annotations

from capacity_plugins.contracts.dialects import TritonFields
from capacity_plugins.dialects.base import (
    NO_OUTPUT,
    OUTPUT,
    VISIBLE,
    Dialect,
    HttpCall,
    MalformedEvent,
    Parser,
    RequestParams,
)
from capacity_plugins.dialects.embeddings import OpenAIEmbeddings, Rerank, TEIEmbed, TEIRerank
from capacity_plugins.dialects.ollama import OllamaChat, OllamaGenerate
from capacity_plugins.dialects.openai import OpenAIChat, OpenAICompletions
from capacity_plugins.dialects.tgi import TGI
from capacity_plugins.dialects.triton import TritonGenerate
from capacity_plugins.errors import UserError

DIALECTS: dict[str, type[Dialect]] = {
    "openai-chat": OpenAIChat,
    "openai-completions": OpenAICompletions,
    "tgi": TGI,
    "ollama": OllamaChat,
    "ollama-generate": OllamaGenerate,
    "triton-generate": TritonGenerate,
    "openai-embeddings": OpenAIEmbeddings,
    "tei-embed": TEIEmbed,
    "rerank": Rerank,
    "tei-rerank": TEIRerank,
}


def get_dialect(name: str, triton: TritonFields | None = None) -> Dialect:
    """The dialect registered under `name`; UserError naming the known ones otherwise.

    `triton`: the model's field names for `triton-generate` (the only dialect with settings);
    the defaults when None. A new instance each call: a dialect may learn about its server
    while a run lasts (triton-generate: delta or cumulative outputs).
    """
    cls = DIALECTS.get(name)
    if cls is None:
        known = ", ".join(sorted(DIALECTS))
        raise UserError(f"--dialect: unknown dialect {name!r} (known: {known})")
    if cls is TritonGenerate:
        return TritonGenerate(triton)
    return cls()


__all__ = [
    "DIALECTS",
    "NO_OUTPUT",
    "OUTPUT",
    "VISIBLE",
    "Dialect",
    "HttpCall",
    "MalformedEvent",
    "Parser",
    "RequestParams",
    "get_dialect",
]
