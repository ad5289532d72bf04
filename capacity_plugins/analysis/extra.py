"""The `analysis` extra (pyproject.toml): its libraries, and whether they are installed.

A worker-only install (the container image's `worker` target) lacks them; a command that needs
them says so in one line instead of a traceback. Importing this module imports none of them
(`find_spec` only looks), so `capacity run`'s supervisor and the matrix can ask before analysing.
"""

from __future__ import annotations

import importlib.util

ANALYSIS_LIBS = ("pandas", "scipy", "matplotlib", "pyarrow")
ANALYSIS_INSTALL = "pip install 'capacity-plugins[analysis]'"


def missing_analysis_libs() -> list[str]:
    """The analysis extra's libraries that are not installed (find_spec imports nothing)."""
    return [name for name in ANALYSIS_LIBS if importlib.util.find_spec(name) is None]
