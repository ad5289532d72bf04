"""Moved to `capacity_plugins.load.users`; this path keeps working (`from capacity_plugins import
LLMUser` is the preferred spelling)."""

from capacity_plugins.load.users import LLMRequestError, LLMUser

__all__ = ["LLMRequestError", "LLMUser"]
