"""Backing off from a server that refuses connections, and honouring Retry-After.

Without it, a dead server turns every user into a tight loop of instant `connect` failures —
tens of thousands of records in seconds, and an open-loop step whose "throughput" falls to zero
reads like saturation. The whole process backs off together (every user talks to the same
server): after n consecutive connection failures no request starts for min(0.1 s · 2^(n-1), 5 s);
any successful response resets it. In open loop the pacer drops the arrivals that fall due during
a backoff and counts them, and the step is flagged, so a dead server never reads as a knee.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass, field

BACKOFF_START_S = 0.1
BACKOFF_CAP_S = 5.0
# A Retry-After longer than this is not waited out (the request timeout usually ends it first).
RETRY_AFTER_CAP_S = 60.0


@dataclass
class Backoff:
    clock: Callable[[], float] = time.time
    failures: int = 0  # consecutive connection failures
    until: float = 0.0  # no request starts before this (Unix time)
    # step → seconds of backoff started during it (reported with the step's counters)
    seconds_by_step: dict[int, float] = field(default_factory=dict)

    def failed(self, step: int | None) -> float:
        """A connection failure: back off (longer each time in a row); returns the pause in s."""
        self.failures += 1
        pause = min(BACKOFF_START_S * 2 ** (self.failures - 1), BACKOFF_CAP_S)
        now = self.clock()
        if now + pause > self.until:
            added = now + pause - max(self.until, now)
            self.until = now + pause
            if step is not None:
                self.seconds_by_step[step] = self.seconds_by_step.get(step, 0.0) + added
        return pause

    def succeeded(self) -> None:
        self.failures = 0

    def remaining(self) -> float:
        return max(0.0, self.until - self.clock())


def retry_after_s(value: object) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) as seconds to wait; None when absent or bad."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), RETRY_AFTER_CAP_S)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when.timestamp() - time.time()), RETRY_AFTER_CAP_S)
