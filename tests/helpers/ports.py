"""Loopback ports: pick a free one, wait until one listens. One clock: time.monotonic."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A port nothing listens on right now (another process may take it before you: where the
    program can bind port 0 and report its port, prefer that)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 20.0, host: str = "127.0.0.1") -> None:
    """Return once something accepts connections on host:port; RuntimeError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout_s:g} s")
