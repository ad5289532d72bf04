"""Request attempt ids: unique across a swarm's processes, cheap enough to take one per attempt.

`uuid4().hex` cost ~2 µs an attempt on a worker's core (a getrandom call and a UUID object),
paid by every request at full ingest. An id here is a random 64-bit prefix drawn once per
process — drawn again in a forked child, since Locust's `--processes` forks its workers — and a
64-bit counter: 32 hex digits, as before, in ~0.5 µs. Two processes share a prefix with
probability ~n²/2⁶⁵ (n processes), i.e. never in practice.
"""

from __future__ import annotations

import itertools
import os

_prefix = ""
_counter = itertools.count()


def _new_process() -> None:
    global _prefix, _counter
    _prefix = os.urandom(8).hex()
    _counter = itertools.count()


_new_process()
os.register_at_fork(after_in_child=_new_process)


def request_id() -> str:
    """A new attempt id: 32 lowercase hex digits, unique across processes."""
    return f"{_prefix}{next(_counter):016x}"
