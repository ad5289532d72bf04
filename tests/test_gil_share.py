"""GilShare (telemetry/_native.py): CPU work in a native thread beside the gevent hub gives the GIL
back after each short slice, at a pace that leaves the hub its core, until the work is late; then
it runs unpaced (the durability bound)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from capacity_plugins.telemetry import _native
from capacity_plugins.telemetry._native import GilShare


class _Clock:
    """perf_counter_ns that a test moves; sleeps are recorded (and move it too)."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.ns += int(s * 1e9)


class _TimeWith:
    """The time module with this test's perf_counter_ns: a native loop still running from an
    earlier test (same module, its own thread) keeps the real monotonic clock."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock

    def perf_counter_ns(self) -> int:
        return self._clock.ns

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(_native, "time", _TimeWith(c))
    monkeypatch.setattr(_native, "_real_sleep", c.sleep)
    return c


def test_no_pause_within_a_slice_then_the_polite_pause(clock: _Clock) -> None:
    share = GilShare(polite_s=0.25)
    for _ in range(5):  # 5 pieces of 10 µs: within one slice
        clock.ns += 10_000
        share()
    assert clock.sleeps == []
    clock.ns += int(GilShare.SLICE_S * 1e9)  # the slice is used up
    share()
    assert clock.sleeps == [GilShare.PAUSE_S]
    # the next slice counts from the pause's end: nothing before it is used up again
    clock.ns += int(GilShare.SLICE_S * 1e9) - 1
    share()
    assert clock.sleeps == [GilShare.PAUSE_S]


def test_the_pace_leaves_the_hub_most_of_the_core(clock: _Clock) -> None:
    share = GilShare(polite_s=10.0)
    start = clock.ns
    for _ in range(1000):  # 10 ms of work in pieces of 10 µs
        clock.ns += 10_000
        share()
    work_share = 0.010 / ((clock.ns - start) / 1e9)
    assert work_share <= 0.06, work_share


def test_late_work_finishes_unpaced(clock: _Clock) -> None:
    share = GilShare(polite_s=0.25)
    clock.ns += int(0.3e9)  # the hub was busy: the work is past its polite time
    for _ in range(100):
        clock.ns += 10_000
        share()
    assert clock.sleeps == []
