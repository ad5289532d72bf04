"""System binaries the tests need (openssl, chromium, prometheus): skipped locally, required in CI."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str) -> str:
    """Path of a needed system binary; skip the test locally when it is missing, but fail in CI."""
    path = shutil.which(name)
    if path:
        return path
    msg = f"{name} not installed (scripts/ensure_system_deps.sh installs it)"
    if IN_CI:
        pytest.fail(msg + " — required in CI")
    pytest.skip(msg)
