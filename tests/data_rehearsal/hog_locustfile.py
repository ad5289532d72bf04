"""Test-only locustfile: the rehearsal, plus a greenlet that starves the generator's own CPU during
step index 1 (busy loops that block the gevent hub) — a deliberately client-limited step."""

import time

import gevent
from locust import events

from capacity_plugins import LLMUser, install

install()


class LLM(LLMUser):
    pass


def _hog(environment):
    while True:
        ctx = getattr(environment, "capacity", None)
        step, _ = ctx.step_provider(time.time()) if ctx is not None else (None, False)
        if step == 1:
            end = time.perf_counter() + 0.3
            while time.perf_counter() < end:  # no yield: the hub (and every send) waits
                pass
            gevent.sleep(0.001)
        else:
            gevent.sleep(0.05)


@events.init.add_listener
def _start_hog(environment, **_):
    if environment.parsed_options is not None and not getattr(environment.parsed_options, "worker", False):
        gevent.spawn(_hog, environment)
