"""The swarm's one clock: this process's wall clock, put on its master's.

Every time a generator process writes (a record's `sent_unix` and `scheduled_unix`, the step it
tags a record with, the pacer's due times, its watch reports) is `master_time()`: the local wall
clock minus this process's measured offset to the master's (swarm/clock.py measures it NTP-style
from round trips at the handshake and every few seconds after, and tells each worker its own).
The master and a local run have offset 0, so for them it is `time.time()`. A worker whose clock
runs 5 s ahead of its master's therefore writes the master's times, not times 5 s off, and steps
announced in the master's time begin and end when the master means.
"""

from __future__ import annotations

import time

_offset_s = 0.0  # local wall clock − master's wall clock


def master_time() -> float:
    """Now, on the master's wall clock (seconds since the epoch)."""
    return time.time() - _offset_s


def set_offset(offset_s: float) -> None:
    """This process's clock is `offset_s` ahead of its master's (negative: behind)."""
    global _offset_s
    _offset_s = float(offset_s)


def offset() -> float:
    return _offset_s
