"""Moved to `capacity_plugins.contracts.records` (kept so existing imports keep working)."""

from capacity_plugins.contracts.records import (  # noqa: F401
    ERROR_KINDS,
    RECORD_FIELDS,
    TOKEN_SOURCES,
    RequestRecord,
    Timings,
)
