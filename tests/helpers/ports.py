"""Loopback ports: pick a free one, wait until one listens. One clock: time.monotonic."""

from __future__ import annotations

import itertools
import os
import random
import socket
import time

# free_port() hands out ports below Linux's ephemeral range (32768-60999 by default), where the
# kernel picks a port for every outgoing connection and every bind to port 0: a port found free
# there can be taken by another test's connection before its program binds it. Each process of
# the suite gets a block of its own (an xdist worker gwN the block N+1, any other process block 0),
# so two tests running side by side never pick the same port either; a random start in the block
# keeps two test sessions on one machine apart too.
_FIRST, _BLOCK, _BLOCKS = 20000, 1000, 12
_picked = itertools.count(random.randrange(_BLOCK))


def _block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return (1 + int(worker[2:])) % _BLOCKS if worker[:2] == "gw" and worker[2:].isdigit() else 0


def free_port() -> int:
    """A port nothing listens on right now, in this process's block; never the same one twice in a
    row. (Where the program can bind port 0 and report its port, prefer that.)"""
    base = _FIRST + _block() * _BLOCK
    for _ in range(_BLOCK):
        port = base + next(_picked) % _BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + _BLOCK - 1}")


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
