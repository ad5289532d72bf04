"""Moved to `capacity_plugins.contracts.planning` (kept so existing imports keep working)."""

from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig, VerdictConfig  # noqa: F401
