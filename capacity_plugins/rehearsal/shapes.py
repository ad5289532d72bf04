"""The rehearsal's shape: walks the steps a scenario's load kind plans.

`plan_steps(scenario)` asks the scenario's load kind (capacity_plugins/kinds/) for its `StepPlan`s
and lets each run on until it has `load.min_requests`; `RehearsalShape` (a Locust `LoadTestShape`)
walks them on the master / local process:

    prepare (the test has started, so the master's workers get their options; ends when every
    generator is ready and, for an open-loop first step, its user pool is up — arrivals must not
    meet a pool still spawning — or after prepare_timeout_s)
    ─► run (duration_s; the first warmup_s excluded) ─► drain (no new requests; in-flight ones
    finish and are recorded; ends when every generator process reports nothing in flight, or after
    drain_timeout_s; then waits, up to prepare_timeout_s, for a worker that joined to be ready)
    ─► (a step a change of the swarm invalidated: await — until every worker is back and ready,
    or prepare_timeout_s — then the same step again, `rerun`) ─► next step … ─► settle (lets workers' last reports reach the master) ─► None

Step boundaries are decided here and announced through callbacks (the rehearsal wiring broadcasts
them to workers and feeds the pacer). The clock and the in-flight count are injected, so `tick()`
is tested without sleeping or a runner.

The shape is never defined in a locustfile's namespace (Locust would pick it up for every run):
the rehearsal wiring sets `environment.shape_class` only when a scenario asks for it, so plain
`-u/-r/-t` runs keep working.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import gevent
from locust import LoadTestShape

from capacity_plugins.kinds import StepPlan
from capacity_plugins.rehearsal.steps import Step

if TYPE_CHECKING:
    from capacity_plugins.kinds import LoadKind
    from capacity_plugins.scenario import Scenario

logger = logging.getLogger(__name__)

# A step short of min_requests runs on up to this many times its planned length (load.max_step_s).
DEFAULT_MAX_STEP_FACTOR = 5.0
# Extensions are decided this long before a window ends (Locust ticks the shape once a second).
EXTEND_LOOKAHEAD_S = 2.5
# ... from at least this much of the window's measured time, unless no later tick could decide.
EXTEND_MIN_SEEN_S = 1.0


def plan_steps(scenario: Scenario) -> list[StepPlan]:
    """The scenario's planned steps (its load kind's `plan`), each allowed to run on for min_requests."""
    return [extended(p, scenario.load) for p in scenario.load.plan(scenario)]


def extended(plan: StepPlan, load: LoadKind) -> StepPlan:
    """`plan` with the load's min_requests and how long it may run to reach them (a trace window: never)."""
    if plan.trace is not None:
        return replace(plan, min_requests=load.min_requests, max_duration_s=plan.duration_s)
    cap = load.max_step_s if load.max_step_s is not None else DEFAULT_MAX_STEP_FACTOR * plan.duration_s
    return replace(plan, min_requests=load.min_requests, max_duration_s=max(cap, plan.duration_s))


# Callbacks the wiring installs; all optional.
OnStep = Callable[[Step], None]


class RehearsalShape(LoadTestShape):
    """Walks a list of StepPlans: run, drain, …, settle, stop."""

    abstract = True  # never auto-discovered; installed on environment.shape_class by the wiring

    def __init__(
        self,
        plans: list[StepPlan],
        *,
        drain_timeout_s: float,
        in_flight: Callable[[float], int | None],
        measured: Callable[[int], int] | None = None,
        next_plan: Callable[[Step], StepPlan | None] | None = None,
        rerun: Callable[[Step], StepPlan | None] | None = None,
        ready: Callable[[], bool] = lambda: True,
        users_running: Callable[[], int] | None = None,
        prepare_timeout_s: float = 60.0,
        rerun_wait_s: float | None = None,
        settle_s: float = 0.0,
        open_loop_lead_s: float = 0.25,
        clock: Callable[[], float] = time.time,
        on_step_start: OnStep | None = None,
        on_window_end: OnStep | None = None,
        on_window_extended: OnStep | None = None,
        on_drain_end: OnStep | None = None,
        on_finished: Callable[[], None] | None = None,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        if not plans:
            raise ValueError("a rehearsal needs at least one step")
        self.plans = plans
        self._planned = len(plans)  # a web-UI restart drops the steps a search added
        self.drain_timeout_s = drain_timeout_s
        # in_flight(since_unix): requests running across all generator processes, counting only
        # reports made after since_unix; None while some process has not reported since then.
        self.in_flight = in_flight
        # measured(step index): requests of the step's window finished so far (None: never extend).
        self.measured = measured
        # next_plan(finished step): the step to run after the planned ones, chosen from what the
        # finished one measured (a capacity search); None ends the rehearsal.
        self.next_plan = next_plan
        # rerun(drained step): the same step again, right after it (a change of the swarm made it
        # invalid), or None. The next step then waits for ready() as after a join.
        self.rerun = rerun
        # ready(): every generator can send (options applied, corpus loaded). A step that started
        # before would hand its first arrivals to processes that cannot send them.
        self.ready = ready
        self.users_running = users_running
        self.prepare_timeout_s = prepare_timeout_s
        # How long a re-run waits for the swarm to be whole again (then it runs with who is there).
        self.rerun_wait_s = prepare_timeout_s if rerun_wait_s is None else rerun_wait_s
        self.settle_s = settle_s
        # Open-loop steps start slightly in the future so workers hear of them before the first arrival.
        self.open_loop_lead_s = open_loop_lead_s
        self.clock = clock
        self.on_step_start = on_step_start
        self.on_window_end = on_window_end
        self.on_window_extended = on_window_extended
        self.on_drain_end = on_drain_end
        self.on_finished = on_finished
        self.on_reset = on_reset
        self._reset_state()

    def _reset_state(self) -> None:
        self.plans[:] = [p for p in self.plans if p.rerun_of is None]
        del self.plans[self._planned:]
        self.phase = "idle"  # idle → prepare → run → drain → (await → run …) → settle → done
        self.index = -1
        self.current: Step | None = None
        self.phase_since = 0.0
        self.steps: list[Step] = []

    def reset_time(self) -> None:
        # Locust calls this when a shape test (re)starts — a web-UI restart begins a fresh rehearsal —
        # but MasterRunner.start() also calls it from the shape greenlet right after our first tick
        # (the test's start): ignore that one, the rehearsal has already begun.
        super().reset_time()
        runner = self.runner
        if runner is not None and getattr(runner, "shape_greenlet", None) is gevent.getcurrent():
            return
        self._reset_state()
        if self.on_reset:
            self.on_reset()

    @property
    def finished(self) -> bool:
        return self.phase == "done"

    # -- the state machine -------------------------------------------------------------------------------
    def _start_step(self, i: int, now: float) -> None:
        plan = self.plans[i]
        start = now + (self.open_loop_lead_s if plan.open_loop else 0.0)
        step = Step(
            index=i,
            kind=plan.kind,
            level=plan.level,
            start_unix=start,
            warmup_end_unix=start + plan.warmup_s,
            end_unix=start + plan.duration_s,
            target_rps=plan.target_rps,
            arm=plan.arm,
            arm_spec=plan.arm_spec,
            rerun_of=plan.rerun_of,
            rerun_reason=plan.rerun_reason,
        )
        self.index, self.current, self.phase, self.phase_since = i, step, "run", now
        self.steps.append(step)
        logger.info("step %d/%d: %s %g%s", i + 1, len(self.plans), plan.kind, plan.level,
                    f" ({plan.arm} arm)" if plan.arm else "")
        if self.on_step_start:
            self.on_step_start(step)

    def _tuple(self, users: int, plan: StepPlan) -> tuple[int, float]:
        return (users, plan.spawn_rate)

    @staticmethod
    def _drain_tuple(plan: StepPlan) -> tuple[int, float]:
        if plan.open_loop:
            return (plan.users, plan.spawn_rate)
        # Tell every user to stop at once: a ramp-down at the spawn rate would let the last ones
        # start new requests during the drain (excluded from the step, but they delay the next one).
        return (0, max(plan.spawn_rate, 10.0 * plan.users))

    def _extension(self, plan: StepPlan, now: float) -> float | None:
        """A later window end when the step will be short of measured requests and may run on.

        Decided EXTEND_LOOKAHEAD_S before the window ends, from the rate measured so far, so every
        generator hears of the new end while its window is still open (a pacer that reached the
        old end would have stopped, and a user would have stopped sending). Not from less than
        EXTEND_MIN_SEEN_S of measured time while a later tick can still decide: a rate read right at
        the warm-up's end is zero (no measured request has finished yet), and that guess grew every
        3-s step to 6 s.
        """
        assert self.current is not None
        step = self.current
        if self.measured is None or not plan.min_requests or now < step.end_unix - EXTEND_LOOKAHEAD_S:
            return None
        seen_s = now - step.warmup_end_unix
        # Locust ticks the shape once a second: the next tick is the last chance if it would come
        # less than half a second before the end.
        if seen_s < EXTEND_MIN_SEEN_S and now + 1.0 <= step.end_unix - 0.5:
            return None
        cap = step.start_unix + plan.longest_s
        if step.end_unix >= cap:
            return None
        have = self.measured(step.index)
        rate = have / seen_s if seen_s > 0 else 0.0
        expected = have + rate * max(step.end_unix - now, 0.0)
        if expected >= plan.min_requests:
            return None
        # Records reach the master up to a second late: grow by at least the look-ahead.
        need_s = (plan.min_requests - expected) / rate if rate > 0 else plan.duration_s
        return min(cap, step.end_unix + max(EXTEND_LOOKAHEAD_S, 1.1 * need_s))

    def tick(self) -> tuple[int, float] | None:
        now = self.clock()
        if self.phase == "idle":
            # Starting with zero users starts the test (Locust fires test_start: the master sends
            # its workers their setup) without sending anything yet.
            self.phase, self.phase_since = "prepare", now
        if self.phase == "prepare":
            first = self.plans[0]
            pool = first.users if first.open_loop else 0
            waited = now - self.phase_since
            if waited < self.prepare_timeout_s:
                if not self.ready():
                    return (0, first.spawn_rate)
                if self.users_running is not None and self.users_running() < pool:
                    return (pool, first.spawn_rate)  # the pool idles until the step's first arrival
            else:
                logger.warning("the load generators were not ready after %g s; starting anyway", waited)
            self._start_step(0, now)
        assert self.current is not None or self.phase in ("settle", "done")

        if self.phase == "run":
            assert self.current is not None
            plan = self.plans[self.index]
            new_end = self._extension(plan, now)
            if new_end is not None:
                self.current.end_unix = new_end
                if self.on_window_extended:
                    self.on_window_extended(self.current)
            if now < self.current.end_unix:
                return self._tuple(plan.users, plan)
            self.phase, self.phase_since = "drain", now
            if self.on_window_end:
                self.on_window_end(self.current)
            # Closed loop: ramp to 0 (users finish the request they are in: --stop-timeout ≥ drain).
            # Open loop: the pool stays; there are simply no more arrivals.
            return self._drain_tuple(plan)

        if self.phase == "drain":
            assert self.current is not None
            plan = self.plans[self.index]
            busy = self.in_flight(self.phase_since)
            timed_out = now - self.phase_since >= self.drain_timeout_s
            if busy != 0 and not timed_out:
                return self._drain_tuple(plan)
            # A worker that joined is sent the options again with the new shard count: the next
            # step waits until every generator applied them (or prepare_timeout_s), or users
            # handed to a worker not yet set up would measure a lower load than the step claims.
            if not self.ready() and now - self.phase_since < self.drain_timeout_s + self.prepare_timeout_s:
                return self._drain_tuple(plan)
            if timed_out and busy:
                logger.warning("step %d: %s requests still in flight after the %g s drain", self.index, busy, self.drain_timeout_s)
            self.current.drain_end_unix = now
            if self.on_drain_end:
                self.on_drain_end(self.current)
            again = self.rerun(self.current) if self.rerun is not None else None
            if again is not None:
                # the re-run waits until the swarm is whole and ready again (phase "await")
                self.plans.insert(self.index + 1, again)
                self.phase, self.phase_since = "await", now
                return self._drain_tuple(plan)
            if self.index + 1 == len(self.plans) and self.next_plan is not None:
                chosen = self.next_plan(self.current)
                if chosen is not None:
                    self.plans.append(chosen)
            if self.index + 1 < len(self.plans):
                self._start_step(self.index + 1, now)
                nxt = self.plans[self.index]
                return self._tuple(nxt.users, nxt)
            self.phase, self.phase_since = "settle", now

        if self.phase == "await":
            plan = self.plans[self.index]
            if not self.ready():
                if now - self.phase_since < self.rerun_wait_s:
                    return self._drain_tuple(plan)
                logger.warning("the swarm was not whole again after %g s; re-running step %d anyway",
                               now - self.phase_since, self.index + 1)
            self._start_step(self.index + 1, now)
            nxt = self.plans[self.index]
            return self._tuple(nxt.users, nxt)

        if self.phase == "settle":
            if now - self.phase_since < self.settle_s:
                return (0, self.plans[-1].spawn_rate)
            self.phase = "done"
            if self.on_finished:
                self.on_finished()
        return None
