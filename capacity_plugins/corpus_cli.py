"""Moved to `capacity_plugins.corpus.cli`; re-exported for old imports."""

from capacity_plugins.corpus.cli import main

__all__ = ["main"]
