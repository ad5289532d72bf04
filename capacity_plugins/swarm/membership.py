"""The master's view of its swarm: which workers are there, which were lost, which joined late.

A capacity measured while a worker was missing is a capacity of a smaller swarm: the step is
invalid, the run incomplete, and whoever reads the report must see it. Locust marks a worker
`missing` after it stops sending heartbeats and later forgets it entirely; this remembers every
worker ever seen, so a lost one stays lost (in the live view, meta.json `workers_lost`, the steps
it overlapped) for the rest of the run.

A lost worker that comes back under the same identity (its Locust client id: a link cut for
longer than the master's heartbeat tolerance, then restored; the worker stopped its load meanwhile,
swarm/deadman.py) *rejoins*: the steps it missed stay invalid (and are re-run,
rehearsal/authority.py), but the run is not incomplete for it (`rejoined_list`, meta.json
`workers_rejoined`).

Only a worker that goes while a test runs counts: after a test stops, workers leaving is how a
swarm ends (`tracking` is switched off at test_stopping and on again at the next test_start).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import gevent

if TYPE_CHECKING:
    from capacity_plugins.client.events import CapacityEvents

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0


class SwarmMembership:
    def __init__(self, runner: Any, events: CapacityEvents | None = None) -> None:
        self.runner = runner
        self.events = events  # worker_lost is fired there
        self.lost: dict[str, dict[str, Any]] = {}  # every loss, rejoined or not (the steps it overlapped)
        self.rejoined: dict[str, dict[str, Any]] = {}  # client id → its loss, with `rejoined_unix`
        self.seen: dict[str, int | None] = {}  # client id → worker index, every worker ever connected
        self.joined_unix: dict[str, float] = {}
        self.tracking = False  # a test is running: a worker that goes now is lost
        self._greenlet: Any = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _loop(self) -> None:
        while True:
            try:
                self.check()
            except Exception:  # the watch must outlive a surprise in Locust's state
                log.exception("worker watch failed")
            gevent.sleep(CHECK_INTERVAL_S)

    def _index(self, client_id: str) -> int | None:
        try:
            idx = self.runner.get_worker_index(client_id)
        except Exception:
            return self.seen.get(client_id)
        return int(idx) if idx is not None else None

    def check(self, now_unix: float | None = None) -> None:
        now = time.time() if now_unix is None else now_unix
        changed = False
        present = {}
        for c in list(self.runner.clients.all):
            present[c.id] = c
            if c.id not in self.seen:
                self.seen[c.id] = self._index(c.id)
                self.joined_unix[c.id] = now
                if self.tracking:
                    log.warning("capacity: worker %s joined during the test; the step it joined in is invalid",
                                self.seen[c.id])
            if self.tracking and c.state == "missing" and (c.id not in self.lost or c.id in self.rejoined):
                self.rejoined.pop(c.id, None)
                changed |= self._mark_lost(c.id, now, "no heartbeat (Locust marked it missing)")
            elif c.state != "missing" and c.id in self.lost and c.id not in self.rejoined:
                self.rejoined[c.id] = {**self.lost[c.id], "rejoined_unix": now}
                log.warning("capacity: worker %s (%s) rejoined under the same identity after %.0f s",
                            self.seen.get(c.id), c.id, now - self.lost[c.id]["lost_unix"])
        for client_id in self.seen:  # gone from Locust's list without our seeing it go missing
            if self.tracking and client_id not in present and client_id not in self.lost:
                changed |= self._mark_lost(client_id, now, "left the swarm during the test")
        if changed and self.events is not None:
            self.events.worker_lost.fire(lost=self.lost_list())

    def _mark_lost(self, client_id: str, now: float, reason: str) -> bool:
        self.lost[client_id] = {"worker": self.seen.get(client_id), "client_id": client_id, "lost_unix": now,
                                "reason": reason}
        log.warning("capacity: worker %s (%s) is lost: %s; the run goes on with the others",
                    self.seen.get(client_id), client_id, reason)
        return True

    def test_started(self, **_: Any) -> None:
        self.check()
        self.tracking = True

    def test_stopping(self, **_: Any) -> None:
        self.check()  # a worker lost in the last second still counts
        self.tracking = False
        # workers that leave from now on end the swarm; forget them so a next test starts clean
        present = {c.id for c in self.runner.clients.all}
        self.seen = {c: i for c, i in self.seen.items() if c in present or c in self.lost}

    def connected(self) -> list[int]:
        """Indices of the workers connected now (missing and lost ones excluded)."""
        return sorted(
            i for i in (self._index(c.id) for c in self.runner.clients.all if c.state != "missing")
            if i is not None
        )

    def lost_between(self, start_unix: float, end_unix: float) -> list[dict[str, Any]]:
        return [d for d in self.lost.values() if start_unix <= d["lost_unix"] <= end_unix]

    def joined_between(self, start_unix: float, end_unix: float) -> list[int | None]:
        return [self.seen.get(c) for c, u in self.joined_unix.items() if start_unix < u <= end_unix]

    def rejoined_between(self, start_unix: float, end_unix: float) -> list[int | None]:
        return [d["worker"] for d in self.rejoined.values() if start_unix <= d["rejoined_unix"] <= end_unix]

    def lost_list(self) -> list[dict[str, Any]]:
        """Workers lost for good (lost and not back)."""
        gone = [d for c, d in self.lost.items() if c not in self.rejoined]
        return sorted(gone, key=lambda d: (d["worker"] is None, d["worker"] or 0, d["lost_unix"]))

    def rejoined_list(self) -> list[dict[str, Any]]:
        return sorted(self.rejoined.values(), key=lambda d: (d["worker"] is None, d["worker"] or 0, d["lost_unix"]))

    def snapshot(self) -> dict[str, Any]:
        clients = list(self.runner.clients.all)
        connected = [
            {"worker": self._index(c.id), "client_id": c.id, "state": c.state, "users": c.user_count,
             "cpu_pct": c.cpu_usage}
            for c in clients if c.state != "missing"
        ]
        connected.sort(key=lambda d: (d["worker"] is None, d["worker"] or 0))
        return {"mode": "distributed", "count": len(connected), "connected": connected, "lost": self.lost_list(),
                "rejoined": self.rejoined_list()}
