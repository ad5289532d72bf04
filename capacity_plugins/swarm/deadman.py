"""A worker's dead-man's switch: no word from its master for a bounded time, and its load stops.

What Locust does (locust/runners.py): a worker sends a heartbeat every HEARTBEAT_INTERVAL (1 s)
and the master answers each one; the master marks a worker *missing* after HEARTBEAT_LIVENESS
silent seconds (3 in Locust; 10 here, swarm/locust_compat.py); the worker quits only after
MASTER_HEARTBEAT_TIMEOUT (60 s) without an answer, and never stops its users before. A worker
whose master's host vanished kept loading the target for that long, and no one could stop it —
during a peak rehearsal against a production fleet, the one load that must never run unattended.

What this adds, on every worker:

- **the bound** (`--master-silence-s`, env `CAPACITY_MASTER_SILENCE_S`, default
  `DEFAULT_SILENCE_S` = 10 s): once the master has answered once, a worker that hears no
  heartbeat answer for longer stops its users at once — requests in flight are cancelled and
  recorded (`cancelled`, with the reason) — and sends nothing more. The target sees no new request
  from it later than the bound plus `CHECK_INTERVAL_S` after the master's last word;
- **the rejoin window** (`--master-rejoin-s`, env `CAPACITY_MASTER_REJOIN_S`, default
  `DEFAULT_REJOIN_S` = 30 s): the stopped worker keeps its identity (Locust client id, worker
  index, shard) and listens; when the master answers again (a transient cut) it rejoins and takes
  the users the master's next dispatch gives it. When the window passes in silence, it writes the
  records it could not ship to `capacity-unshipped-worker<N>-<unix>.jsonl` (in `$CAPACITY_UNSHIPPED_DIR`,
  else its working folder),
  says why, and exits 1.

The master killed, its host gone or the link cut: all the same to a worker — the answers stop.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent

from capacity_plugins.swarm.locust_compat import drop_unsent_on_exit

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.swarm.shipping import WorkerShipping

log = logging.getLogger(__name__)

DEFAULT_SILENCE_S = 10.0
DEFAULT_REJOIN_S = 30.0
CHECK_INTERVAL_S = 0.25
EXIT_MASTER_LOST = 1  # docs/exit-codes.md: a worker whose master fell silent for good
UNSHIPPED_DIR_ENV = "CAPACITY_UNSHIPPED_DIR"  # where its unshipped records go (default: the working folder)


def add_arguments(parser: Any) -> None:
    """The worker's two bounds as Locust options (and environment variables for the manifests)."""
    parser.add_argument("--master-silence-s", type=float, default=DEFAULT_SILENCE_S, env_var="CAPACITY_MASTER_SILENCE_S",
                       include_in_web_ui=False,
                       help="worker: stop every user and cancel what is in flight after this many seconds "
                            f"without a word from the master (default {DEFAULT_SILENCE_S:g})")
    parser.add_argument("--master-rejoin-s", type=float, default=DEFAULT_REJOIN_S, env_var="CAPACITY_MASTER_REJOIN_S",
                       include_in_web_ui=False,
                       help="worker: after stopping for a silent master, wait this long for it to answer again "
                            f"before exiting 1 (default {DEFAULT_REJOIN_S:g})")


class DeadMansSwitch:
    def __init__(self, environment: Environment, client: LLMClient, sink: WorkerShipping | None,
                 worker_index: Callable[[], int], *, silence_s: float = DEFAULT_SILENCE_S,
                 rejoin_s: float = DEFAULT_REJOIN_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.env = environment
        self.runner: Any = environment.runner
        self.client = client
        self.sink = sink  # the worker's shipping: what the master has not acknowledged, and what was never sent
        self.worker_index = worker_index
        self.silence_s = silence_s
        self.rejoin_s = rejoin_s
        self.clock = clock
        self.last_heard: float | None = None  # armed by the master's first answer
        self.tripped_at: float | None = None
        self.trips: list[dict[str, Any]] = []  # each stop: when, how long silent, rejoined after
        self.gave_up = False
        self._greenlet: Any = None

    def attach(self) -> None:
        self.env.events.heartbeat_received.add_listener(self.heard)
        self.env.events.quitting.add_listener(lambda **_: self.stop())
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None and self._greenlet is not gevent.getcurrent():
            self._greenlet.kill(block=False)
        self._greenlet = None

    def heard(self, **_: Any) -> None:
        now = self.clock()
        if self.tripped_at is not None and not self.gave_up:
            away = now - self.tripped_at
            log.warning("capacity: worker %d: the master answered again %.1f s after this worker stopped; "
                        "rejoining under the same identity", self.worker_index(), away)
            sys.stderr.write(f"capacity: worker {self.worker_index()}: master back after {away:.1f} s; rejoined\n")
            self.trips[-1]["rejoined_after_s"] = round(away, 2)
            self.tripped_at = None
            self.client.cancel_reason = None
        self.last_heard = now

    def _loop(self) -> None:
        while True:
            gevent.sleep(CHECK_INTERVAL_S)
            try:
                self.check()
            except Exception:  # the switch must outlive a surprise in Locust's state
                log.exception("dead-man's switch check failed")

    def check(self, now: float | None = None) -> None:
        if self.last_heard is None or self.gave_up:
            return
        now = self.clock() if now is None else now
        silent = now - self.last_heard
        if self.tripped_at is None:
            if silent > self.silence_s:
                self.trip(silent, now)
        elif now - self.tripped_at > self.rejoin_s:
            self.give_up(silent)

    def trip(self, silent: float, now: float) -> None:
        """Stop every user now (in-flight requests end as `cancelled` records with the reason)."""
        w = self.worker_index()
        reason = (f"no word from the master for {silent:.1f} s (bound --master-silence-s {self.silence_s:g}): "
                  "this worker stopped its load")
        self.tripped_at = now
        self.trips.append({"worker": w, "silent_s": round(silent, 2), "unix": time.time()})
        log.error("capacity: worker %d: %s; waiting up to %g s for the master", w, reason, self.rejoin_s)
        sys.stderr.write(f"capacity: worker {w}: {reason}\n")
        sys.stderr.flush()
        self.client.cancel_reason = f"cancelled: {reason}"
        self.env.stop_timeout = 0  # kill, do not wait: a request in flight must not outlive the bound
        counts = dict(self.runner.user_classes_count)
        if any(counts.values()):
            self.runner.stop_users(counts)

    def give_up(self, silent: float) -> None:
        """The master never came back: keep the unshipped records on disk, say why, exit 1."""
        self.gave_up = True
        w = self.worker_index()
        spilled = self._spill()
        msg = (f"capacity: worker {w}: no word from the master for {silent:.0f} s (rejoin window "
               f"--master-rejoin-s {self.rejoin_s:g} passed); exiting {EXIT_MASTER_LOST}"
               + (f"; {spilled}" if spilled else "") + "\n")
        log.error(msg.strip())
        sys.stderr.write(msg)
        sys.stderr.flush()
        self.env.process_exit_code = EXIT_MASTER_LOST
        drop_unsent_on_exit(self.runner)  # ZeroMQ would wait forever to deliver them at exit
        gevent.spawn(self.runner.quit)

    def _spill(self) -> str | None:
        if self.sink is None:
            return None
        try:
            lines = self.sink.unacknowledged()
        except Exception:
            log.exception("taking the unshipped records failed")
            return None
        if not lines:
            return None
        folder = Path(os.environ.get(UNSHIPPED_DIR_ENV) or ".")
        path = folder / f"capacity-unshipped-worker{self.worker_index()}-{int(time.time())}.jsonl"
        try:
            path.write_bytes(b"".join(lines))
        except OSError as e:
            return f"the unshipped records could not be written ({e})"
        return f"records it could not ship: {path.resolve()}"
