"""Moved to `capacity_plugins.load.plugin`; this path keeps working (`capacity_plugins.install`
is the preferred spelling)."""

from capacity_plugins.load.plugin import install, register

__all__ = ["install", "register"]
