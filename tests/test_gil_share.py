"""GilShare (host.py): CPU work in a native thread beside the gevent hub gives the GIL
back after each short slice, at a pace that leaves the hub its core, until the work is late; then
it runs unpaced (the durability bound)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from capacity_plugins import host
from capacity_plugins.host import GilShare, HubIdleGate, start_native_thread
from capacity_plugins.sinks.records import RecordsSink


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
    monkeypatch.setattr(host, "time", _TimeWith(c))
    monkeypatch.setattr(host, "_real_sleep", c.sleep)
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


class _Gate:
    """HubIdleGate's stand-in: records each wait (and moves the clock, as a timed-out wait would)."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout_s: float) -> None:
        self.waits.append(timeout_s)
        self.clock.ns += int(timeout_s * 1e9)


def test_with_a_gate_the_pause_waits_for_the_hub_not_a_sleep(clock: _Clock) -> None:
    gate = _Gate(clock)
    share = GilShare(polite_s=0.25, gate=gate)  # type: ignore[arg-type]
    clock.ns += int(GilShare.SLICE_S * 1e9)
    share()
    assert gate.waits == [GilShare.PAUSE_S] and clock.sleeps == []


def test_the_hub_opens_the_gate_when_it_has_nothing_to_run_and_not_before(tmp_path: Path) -> None:
    import gevent

    # A records sink takes the hub's gate too: one per hub, as two would each see the other
    # pending and neither would open.
    sink = RecordsSink(tmp_path, "local")
    sink.open()
    gate = HubIdleGate.of_this_hub()
    waited: list[float] = []

    def waiter() -> None:
        t0 = time.monotonic()
        gate.wait(30.0)
        waited.append(time.monotonic() - t0)

    start_native_thread(waiter)
    deadline = time.monotonic() + 10
    while not gate.waiting and time.monotonic() < deadline:
        gevent.sleep(0)  # busy: a callback always queued
    assert gate.waiting, "the native thread never started waiting"
    busy_until = time.monotonic() + 0.3
    while time.monotonic() < busy_until:
        gevent.sleep(0)
    assert waited == [], "opened while the hub still had work queued"
    deadline = time.monotonic() + 10
    while not waited and time.monotonic() < deadline:
        gevent.sleep(0.01)  # idle: the hub blocks in its poll
    sink.close()
    assert waited and waited[0] < 10, "not opened when the hub went idle (its timeout was 30 s)"


def test_a_short_wait_ending_does_not_close_the_gate_on_another_thread(tmp_path: Path) -> None:
    """The hub's gate is shared by every native thread of the process: another records sink's
    writer pausing (GilShare's 2 ms waits) while this thread waits must not strand this one
    until its timeout (it did, in a test process full of sinks: a flag the short wait cleared)."""
    import gevent

    gate = HubIdleGate.of_this_hub()
    waited: list[float] = []
    short_waits: list[int] = []

    def waiter() -> None:
        t0 = time.monotonic()
        gate.wait(30.0)
        waited.append(time.monotonic() - t0)

    def pausing_writer() -> None:
        for _ in range(20):
            gate.wait(GilShare.PAUSE_S)  # the hub stays busy: each times out
        short_waits.append(20)

    start_native_thread(waiter)
    deadline = time.monotonic() + 10
    while not gate.waiting and time.monotonic() < deadline:
        gevent.sleep(0)  # busy: a callback always queued
    assert gate.waiting, "the native thread never started waiting"
    start_native_thread(pausing_writer)
    deadline = time.monotonic() + 10
    while not short_waits and time.monotonic() < deadline:
        gevent.sleep(0)  # still busy while the other thread's waits come and go
    assert short_waits and waited == [], "opened while the hub still had work queued"
    deadline = time.monotonic() + 10
    while not waited and time.monotonic() < deadline:
        gevent.sleep(0.01)  # idle: the hub blocks in its poll
    assert waited and waited[0] < 10, "not opened when the hub went idle (its timeout was 30 s)"
