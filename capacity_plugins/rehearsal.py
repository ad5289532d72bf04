"""Deprecated path: the rehearsal wiring lives in `capacity_plugins.load` now. `rehearsal.install()`
keeps working and is the same call as `capacity_plugins.install()`."""

from capacity_plugins.load.plugin import install

__all__ = ["install"]
