"""The suite's own events, declared the way Locust declares its own (`locust.event.Events`).

One `CapacityEvents` per process, attached as `environment.capacity_events` by the plugin's
`register()`; every part that has news fires it there, every part (and your own locustfile) that
wants the news adds a listener:

    @events.init.add_listener
    def on_init(environment, **_):
        environment.capacity_events.record.add_listener(lambda record, **_: print(record.ttft_ms))

A listener that raises is logged with its traceback and the others still run: a broken exporter
must not lose a record nor stop the swarm (Locust's own hooks would also fail the run's exit code).
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from locust.event import EventHook

log = logging.getLogger(__name__)

ATTRIBUTE = "capacity_events"  # where register() attaches them on the Locust environment


class _Hook(EventHook):
    def fire(self, *, reverse: bool = False, **kwargs: Any) -> None:
        for handler in self._handlers[::-1] if reverse else list(self._handlers):
            try:
                handler(**kwargs)
            except Exception:
                log.error("capacity: listener %r failed:\n%s", handler, traceback.format_exc())


class CapacityEvents:
    record: EventHook
    """
    A finished request record, in the process that writes requests.jsonl (the local runner, or the
    master for its workers' records as they arrive). Listeners must be fast (thousands a second).

    :param record: the `contracts.records.RequestRecord`
    """

    step_started: EventHook
    """
    A step of the rehearsal started (local runner or master: the step authority).

    :param step: the `rehearsal.steps.Step` (index, level, start, warmup end, planned end)
    """

    step_ended: EventHook
    """
    A step's drain ended (its in-flight requests finished or timed out), or the test stopped while
    it ran (then `step.interrupted` is set).

    :param step: the `rehearsal.steps.Step`, its times final
    """

    results_switched: EventHook
    """
    The writing process moved to a fresh results folder: another test started from the web UI.

    :param folder: the new folder (a `pathlib.Path`)
    """

    worker_lost: EventHook
    """
    The master lost a worker while a test ran (no heartbeat, or it left): the steps it overlapped
    are invalid and the run is incomplete.

    :param lost: every worker lost so far, as meta.json's `workers_lost` lists them
    """

    writing_meta: EventHook
    """
    meta.json is about to be written (at the end of a test, and when the process quits): add what
    you know to it. Fired in the process that writes the results folder (local runner or master).

    :param meta: the document (contracts/meta.py `Meta`); a listener sets the fields it knows
    """

    def __init__(self) -> None:
        for name in self.__annotations__:
            setattr(self, name, _Hook())

    @classmethod
    def of(cls, environment: Any) -> CapacityEvents:
        found = getattr(environment, ATTRIBUTE, None)
        if not isinstance(found, cls):
            raise RuntimeError("capacity plugin not registered on this environment (capacity_plugins.install)")
        return found

    def attach(self, environment: Any) -> None:
        setattr(environment, ATTRIBUTE, self)
