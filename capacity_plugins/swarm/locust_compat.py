"""The one place the plugin works around Locust instead of using a public hook — and why.

`MasterRunner.quit()` sends "quit" to the workers and waits a fixed 0.5 s "for final stats report
from all workers" before it kills its own message loop. A worker ships its last batch of request
records when it stops, and on a busy host that batch can take longer than 0.5 s to arrive: the
records would be lost. Locust fires no event between "workers told to stop" and "message loop
killed" on this path (`--run-time`, the web UI's quit and the end of a headless shape all call
`quit()` directly, and `quitting` fires only after it returned), so the master's quit is wrapped:
first stop the workers the public way (`runner.stop()`: they stop their users and ship), wait for
every final batch (bounded), then Locust's own quit.

The second: Locust's shutdown closes its CSV files (`StatsCSVFileWriter.close_files`) without
stopping the greenlet that rewrites them every second, and then lets the hub run again (with
`--processes`, the master's atexit waits for its workers): when the writer's timer fell due in
between, it writes to the closed files and prints `ValueError: I/O operation on closed file`
tracebacks at the end of a clean run. Locust keeps no handle on that greenlet, so the writer is
wrapped to note its own greenlet, which is killed at `quit` (fired just before the files close).

The third: Locust's master marks a worker *missing* after 3 heartbeats (HEARTBEAT_LIVENESS, 1 s
apart) did not arrive, with no option to change it. Generators here run on busy hosts: on 2 cores
with two CPU burners, a worker just connected (and still starting up) went silent for 3–6 s and
Locust marked it missing; with both workers at once, Locust stopped the test ("the last worker went
missing"), in 3 of 5 runs. The master tolerates HEARTBEAT_LIVENESS_S instead. Trust does not rest
on Locust's flag: a worker whose watch reports stop for SILENT_AFTER_S (rehearsal/authority.py)
invalidates the step all the same, and one that never comes back is still lost.

The fourth, on a worker (swarm/deadman.py): Locust's worker socket is ZeroMQ's, whose default
linger is forever. A worker that gives up on a master gone for good still has heartbeats and
record batches queued for it, and its exit would wait for them to be delivered — for ever. Before
it exits, its socket's linger is set to 0 (`drop_unsent_on_exit`): what was queued for a master
that is gone is dropped (the records among it are on disk, written by the switch first). Its stop
uses Locust's own `stop_users` and the public `heartbeat_received` event.

The fifth, on a worker: Locust's worker, for every spawn message (each step's users), keeps the
master's options that are not Locust's own with `k not in argument_parser.default_args_dict()`
inside a dict comprehension — a whole Locust argument parser built and parsed once per option the
master sent (85 with this plugin's). Each takes ~13 ms on an idle core, so the worker's loop
stopped ~1.1 s at every step change (no heartbeat, no watch report, its requests' timings
stalled); on 2 busy cores it stopped 4.6–9.7 s, and under libfaketime (a worker with a shifted
clock) long enough for the master to mark it missing. Locust's own options are the same for the
whole process (no config file is read), so `parse_locust_defaults_once` computes them once and
hands out copies.

`tests/test_locust_compat.py` checks that Locust still has the shape these rely on; when Locust
gains a hook or an option here, replace the workaround with a listener or the option.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import gevent

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


# Greenlets running StatsCSVFileWriter.stats_writer in this process (Locust spawns one per --csv run).
_csv_writers: list[Any] = []


def track_csv_writer() -> None:
    """Wrap Locust's CSV writer loop so that its greenlet can be stopped (`stop_csv_writers`); idempotent."""
    from locust.stats import StatsCSVFileWriter

    original = getattr(StatsCSVFileWriter, "stats_writer", None)
    if original is None or getattr(original, "_capacity_tracked", False):
        return  # another Locust (tests/test_faults_runs.py would show the race again) or done

    @functools.wraps(original)
    def stats_writer(self: Any) -> None:
        me = gevent.getcurrent()
        _csv_writers.append(me)
        try:
            original(self)
        finally:
            if me in _csv_writers:
                _csv_writers.remove(me)

    stats_writer._capacity_tracked = True  # type: ignore[attr-defined]
    StatsCSVFileWriter.stats_writer = stats_writer  # type: ignore[method-assign]


def stop_csv_writers(**_: Any) -> None:
    """A `quit` listener: stop the CSV writer before Locust closes its files (it never writes to
    them again; its last rows are those of its last round, as before)."""
    while _csv_writers:
        writer = _csv_writers.pop()
        if writer is not gevent.getcurrent():
            writer.kill(block=True, timeout=5)


def parse_locust_defaults_once() -> None:
    """Locust's own option defaults parsed once per process, not once per option of each spawn
    message (the fifth, above); idempotent. A copy each call: a caller may change what it gets."""
    from locust import argument_parser

    original = argument_parser.default_args_dict
    if getattr(original, "_capacity_once", False):
        return
    parsed: list[dict[str, Any]] = []

    @functools.wraps(original)
    def default_args_dict() -> dict[str, Any]:
        if not parsed:
            parsed.append(original())
        return dict(parsed[0])

    default_args_dict._capacity_once = True  # type: ignore[attr-defined]
    argument_parser.default_args_dict = default_args_dict


def drop_unsent_on_exit(runner: Any) -> None:
    """A worker's ZeroMQ socket drops what is still queued for its master when it closes (linger 0)."""
    try:
        import zmq

        runner.client.socket.setsockopt(zmq.LINGER, 0)
    except Exception:  # not a worker of this Locust's shape: nothing queued to drop
        log.debug("could not set the worker socket's linger", exc_info=True)
