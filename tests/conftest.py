# Locust monkey-patches the stdlib on import; importing requests/urllib3 before it crashes
# (gevent must patch ssl before they import it). This line must stay first.
import locust  # noqa: F401, I001

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Each area keeps its fixtures in its own module so that parallel work never edits this file.
# (No option here may be named --host: Locust's pytest plugin registers it.)
pytest_plugins = [
    "fixtures_simulator",
    "fixtures_telemetry",
    "fixtures_core",
    "fixtures_run",
    "fixtures_faults",
]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_binary(name: str) -> str:
    """Path of a needed system binary; skip locally when missing, but fail in CI."""
    path = shutil.which(name)
    if path:
        return path
    msg = f"{name} not installed (scripts/ensure_system_deps.sh installs it)"
    if IN_CI:
        pytest.fail(msg + " — required in CI")
    pytest.skip(msg)


@pytest.fixture
def repo_root() -> Path:
    return ROOT
