"""Test-only locustfile: the rehearsal, plus a greenlet that starves the generator's own CPU during
step index 1 (busy loops that block the gevent hub) — a deliberately client-limited step."""

import time

import gevent
from locust import events

from capacity_plugins import LLMUser, install

install()


class LLM(LLMUser):
    pass


_running: list = [None]  # the step the rehearsal runs now, until its drain ended (step_started / step_ended)


def _hog():
    while True:
        step = _running[0]
        if step is not None and step.index == 1:
            end = time.perf_counter() + 0.3
            while time.perf_counter() < end:  # no yield: the hub (and every send) waits
                pass
            gevent.sleep(0.001)
        else:
            gevent.sleep(0.05)


@events.init.add_listener
def _start_hog(environment, **_):
    if environment.parsed_options is not None and not getattr(environment.parsed_options, "worker", False):
        steps = environment.capacity_events  # the plugin's init listener (install()) ran first
        steps.step_started.add_listener(lambda step, **_: _running.__setitem__(0, step))
        steps.step_ended.add_listener(lambda step, **_: _running.__setitem__(0, None))
        gevent.spawn(_hog)
