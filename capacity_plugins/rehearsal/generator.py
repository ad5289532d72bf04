"""What every load-generating process does during a rehearsal (the local runner, or each worker).

- keeps the step timeline every record is tagged with (`RequestSource.timeline`);
- runs the pacer for open-loop steps: its shard k of n of the one global arrival schedule;
- watches itself (`SelfWatch`: CPU, RSS, event-loop lag) and knows how many requests it has in
  flight, so the authority can end a drain and judge whether the generator kept up;
- a worker learns each step from the master's messages and reports `Watch` once a second.

The authority (rehearsal/authority.py) decides the steps; this side only follows them.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import gevent

from capacity_plugins.client.pacer import Pacer
from capacity_plugins.contracts.clock import master_time
from capacity_plugins.corpus.trace import session_shard
from capacity_plugins.rehearsal.arrivals import ArrivalPlan, shard
from capacity_plugins.rehearsal.source import RequestSource
from capacity_plugins.rehearsal.steps import Step, StepTimeline
from capacity_plugins.rehearsal.watch import WATCH_INTERVAL_S, SelfWatch
from capacity_plugins.swarm import messages

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.client.client import LLMClient

log = logging.getLogger(__name__)

HOST = socket.gethostname()


class GeneratorSide:
    def __init__(self, environment: Environment, source: RequestSource, client: LLMClient, watch_name: str) -> None:
        self.env = environment
        self.source = source  # what this process's users send: its timeline and pacer are kept here
        self.client = client  # the users' stream reads and backoff, for the step counters
        self.runner: Any = environment.runner
        self.watch = SelfWatch(watch_name)

    @property
    def timeline(self) -> StepTimeline:
        return self.source.timeline

    @property
    def pacer(self) -> Pacer | None:
        # one pacer per process, on the source: users read it at every iteration
        return self.source.pacer

    def attach(self) -> None:
        self.env.events.test_stopping.add_listener(self._on_test_stopping)
        self.env.events.quitting.add_listener(self._on_quitting)
        self.watch.start()

    def in_flight(self) -> int:
        # Open loop: users holding an arrival. Closed loop: running users (they stop after their request).
        if self.pacer is not None:
            return self.pacer.in_flight
        return int(self.runner.user_count)

    def step_counters(self) -> dict[int, dict[str, Any]]:
        """Cumulative counters per step: the pacer's (cap hits, dispatch lag p99) and the
        readers' (stream reads, reads that found a backlog)."""
        out: dict[int, dict[str, Any]] = {}
        if self.pacer is not None:
            out = {i: st.as_message() for i, st in self.pacer.stats.items()}
        for i, (reads, backlog) in self.client.read_counts.items():
            out.setdefault(i, {}).update(reads=reads, backlog_reads=backlog)
        for i, seconds in self.client.backoff.seconds_by_step.items():
            out.setdefault(i, {})["backoff_s"] = round(seconds, 3)
        return out

    def step_started(self, step: Step, plan: ArrivalPlan | None, shard_index: int, shard_count: int) -> None:
        self.timeline.upsert(step)
        if step.arm_spec is not None:
            self.source.cache_arm.prepare(step.arm_spec)  # built now, not in the step's first request
        if plan is None:
            return
        offsets = shard(plan.schedule(step.index), shard_index, shard_count)
        requests = None
        if plan.requests is not None:  # trace replay: the same shard of the window's requests
            requests = list(plan.requests)[shard_index::shard_count]
            self.source.trace_block_tokens = plan.block_tokens
            if plan.sessions:  # a session's turns stay in one process (its history lives there)
                mine = session_shard(plan.requests, shard_index, shard_count)
                offsets = plan.schedule(step.index)[mine]
                requests = [plan.requests[i] for i in mine]
                self.source.trace_sessions = True
        self.source.ensure_pacer().begin(step.index, step.start_unix, offsets, step.warmup_end_unix, step.end_unix,
                                      requests=requests)

    def step_updated(self, step: Step) -> None:
        self.timeline.upsert(step)
        pacer = self.pacer
        if pacer is None or pacer.step != step.index:
            return
        if step.drain_end_unix is not None or master_time() >= step.end_unix:
            pacer.stop()  # no request starts once the step's window has closed
        else:
            pacer.extend(step.end_unix)  # the window was extended for min_requests

    def finished(self) -> None:
        self.timeline.finished = True
        self.env.stop_timeout = 0  # drained; see _on_test_stopping

    def reset(self) -> None:
        self.source.timeline = StepTimeline()

    def _on_test_stopping(self, **_: Any) -> None:
        if self.pacer is not None:
            self.pacer.stop()
        if self.timeline.steps:
            # The rehearsal raised stop_timeout so that step drains let requests finish. At the stop
            # itself: finished = already drained; interrupted = do not wait out the drain timeout,
            # users are killed now and their in-flight requests recorded as cancelled (LLMUser
            # catches GreenletExit). Either way 0 — a worker also sleeps stop_timeout after a
            # "stop" before it answers the master again, and would miss the master's quit.
            self.env.stop_timeout = 0

    def _on_quitting(self, **_: Any) -> None:
        self.watch.stop()


class WorkerSide(GeneratorSide):
    """A worker: steps arrive as messages; it reports Watch to the master every second."""

    def __init__(self, environment: Environment, source: RequestSource, client: LLMClient) -> None:
        super().__init__(environment, source, client, f"worker-{source.worker_index}")
        self._reporter: Any = None

    def attach(self) -> None:
        super().attach()
        messages.on(self.runner, messages.StepStarted, self._on_started)
        messages.on(self.runner, messages.StepUpdated, lambda m: self.step_updated(Step.from_message(m.step)))
        messages.on(self.runner, messages.StepsFinished, lambda m: self.finished())
        messages.on(self.runner, messages.StepsReset, lambda m: self.reset())

    def _on_started(self, m: messages.StepStarted) -> None:
        if self._reporter is None:  # a rehearsal: the master's authority listens to Watch
            self._reporter = gevent.spawn(self._report_loop)
        step, plan = Step.from_message(m.step), ArrivalPlan(**m.plan) if m.plan else None
        k = m.shards.get(self.source.worker_index)
        if plan is not None and k is None:
            log.warning("worker %s has no shard of step %s's arrivals", self.source.worker_index, step.index)
            self.timeline.upsert(step)
            return
        self.step_started(step, plan, int(k or 0), m.shard_count)

    def _report_loop(self) -> None:
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            try:
                messages.send(self.runner, messages.Watch(
                    worker=self.source.worker_index, host=HOST, unix=master_time(), in_flight=self.in_flight(),
                    cpu=self.watch.new_cpu(), loop_lag=self.watch.new_lag(), steps=self.step_counters(),
                ))
            except Exception:
                log.exception("sending the self-watch report failed")

    def _on_quitting(self, **_: Any) -> None:
        if self._reporter is not None:
            self._reporter.kill(block=False)
        super()._on_quitting()
