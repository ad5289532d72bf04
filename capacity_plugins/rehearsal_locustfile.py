"""Moved to `capacity_plugins/load/locustfile.py`; this path keeps working as a locustfile."""

from capacity_plugins.load.locustfile import LLM  # noqa: F401  (Locust picks up the user class)
