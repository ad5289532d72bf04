"""API dialects: one module per server API, no Locust import (see base.py for the contract)."""

from __future__ import annotations

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
from capacity_plugins.dialects.ollama import OllamaChat, OllamaGenerate
from capacity_plugins.dialects.openai import OpenAIChat, OpenAICompletions
from capacity_plugins.dialects.tgi import TGI
from capacity_plugins.errors import UserError

DIALECTS: dict[str, type[Dialect]] = {
    "openai-chat": OpenAIChat,
    "openai-completions": OpenAICompletions,
    "tgi": TGI,
    "ollama": OllamaChat,
    "ollama-generate": OllamaGenerate,
}


def get_dialect(name: str) -> Dialect:
    """The dialect registered under `name`; UserError naming the known ones otherwise."""
    try:
        return DIALECTS[name]()
    except KeyError:
        known = ", ".join(sorted(DIALECTS))
        raise UserError(f"--dialect: unknown dialect {name!r} (known: {known})") from None


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
