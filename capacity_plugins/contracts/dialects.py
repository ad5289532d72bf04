"""Names of the API dialects, as scenarios, flags, records and the registry spell them."""

from __future__ import annotations

from typing import Final

DIALECTS: Final[tuple[str, ...]] = ("openai-chat", "openai-completions", "tgi", "ollama", "ollama-generate")
