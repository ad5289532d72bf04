"""The one place the plugin works around Locust instead of using a public hook — and why.

`MasterRunner.quit()` sends "quit" to the workers and waits a fixed 0.5 s "for final stats report
from all workers" before it kills its own message loop. A worker ships its last batch of request
records when it stops, and on a busy host that batch can take longer than 0.5 s to arrive: the
records would be lost. Locust fires no event between "workers told to stop" and "message loop
killed" on this path (`--run-time`, the web UI's quit and the end of a headless shape all call
`quit()` directly, and `quitting` fires only after it returned), so the master's quit is wrapped:
first stop the workers the public way (`runner.stop()`: they stop their users and ship), wait for
every final batch (bounded), then Locust's own quit.

The second: Locust's master marks a worker *missing* after 3 heartbeats (HEARTBEAT_LIVENESS, 1 s
apart) did not arrive, with no option to change it. Generators here run on busy hosts: on 2 cores
with two CPU burners, a worker just connected (and still starting up) went silent for 3–6 s and
Locust marked it missing; with both workers at once, Locust stopped the test ("the last worker went
missing"), in 3 of 5 runs. The master tolerates HEARTBEAT_LIVENESS_S instead. Trust does not rest
on Locust's flag: a worker whose watch reports stop for SILENT_AFTER_S (load/authority.py)
invalidates the step all the same, and one that never comes back is still lost.

`tests/test_locust_compat.py` checks that Locust still has the shape this relies on; when Locust
gains a hook or an option here, replace this module with a listener or the option.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# What MasterRunner.quit() is expected to contain (checked by the test, not at run time).
EXPECTED_QUIT_WAIT = "gevent.sleep(0.5)"
# Heartbeats (1 s apart) a worker may miss before the master marks it missing; Locust's is 3.
HEARTBEAT_LIVENESS_S = 10


def tolerate_slow_heartbeats() -> None:
    """The master marks a worker missing after HEARTBEAT_LIVENESS_S silent seconds, not 3.

    Locust reads the module's HEARTBEAT_LIVENESS each time it registers a worker or hears its
    heartbeat, so setting it before any worker connects covers every worker of this process."""
    import locust.runners

    locust.runners.HEARTBEAT_LIVENESS = max(locust.runners.HEARTBEAT_LIVENESS, HEARTBEAT_LIVENESS_S)


def wait_for_workers_before_quit(runner: Any, ran: Callable[[], bool],
                                 wait_for_finals: Callable[[Callable[[], set[int]]], bool]) -> None:
    """Make `runner.quit()` stop the workers and wait for their final record batches first.

    `ran()` says whether a test ran at all (no workers to wait for otherwise); `wait_for_finals(expected)`
    blocks until every worker index in `expected()` sent its final batch, or a deadline passes.
    """
    from locust.runners import STATE_INIT, STATE_MISSING, STATE_STOPPED, STATE_STOPPING

    original_quit = runner.quit

    def quit_after_final_records() -> None:
        try:
            if ran():
                ran_on = {c.id for c in runner.clients.all}

                def expected() -> set[int]:
                    # a worker marked missing (killed, no heartbeat) will never send a final batch
                    return {
                        runner.get_worker_index(c.id)
                        for c in runner.clients.all
                        if c.id in ran_on and c.state != STATE_MISSING
                    }

                if runner.state not in (STATE_INIT, STATE_STOPPED, STATE_STOPPING):
                    runner.stop()  # sends stop to workers, waits until they report zero users
                wait_for_finals(expected)
        except Exception:
            log.exception("waiting for the workers' final records failed")
        original_quit()

    runner.quit = quit_after_final_records
