"""Live view: the LLM tab in Locust's web UI, /llm/stats, downloads, and the live /metrics exporter."""

from __future__ import annotations

from typing import Any


def install(events: Any) -> None:
    """Register this package's listeners on `events` (called once by plugin.install)."""
