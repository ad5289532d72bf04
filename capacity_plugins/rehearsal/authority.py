"""The step authority: the local runner or the master walks the scenario's steps and keeps their books.

It owns the shape (`RehearsalShape`, installed as `environment.shape_class` only when a scenario
is given, so plain -u/-r/-t runs keep working), the step timeline every record is tagged with,
and `StepAccounting`, fed by every finished record and by every generator process's self-watch.
It announces each step to the workers (`StepStarted` before the users for it are dispatched —
ZeroMQ keeps the order — and `StepUpdated` at the window's end and the drain's end), ends a drain
only when every generator reported nothing in flight after the drain began, prints progress, and
writes steps.json after every step and at the end, so an interrupted run still has one.

A stop before the shape finished (Ctrl-C, SIGTERM, the web UI's stop) clips the running step to
what was actually measured and marks it `interrupted`; meta.json then says `complete: false`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import gevent

from capacity_plugins.contracts.meta import Meta, Telemetry
from capacity_plugins.contracts.slo import judge_mix, judge_step
from capacity_plugins.kinds import NextSteps, StepPlan
from capacity_plugins.rehearsal.arrivals import ArrivalPlan, offered_in_window
from capacity_plugins.rehearsal.generator import HOST, GeneratorSide
from capacity_plugins.rehearsal.results import ResultsFolder, analyse_in_background
from capacity_plugins.rehearsal.shapes import RehearsalShape, extended, plan_steps
from capacity_plugins.rehearsal.steps import (
    ClientLimits,
    Step,
    StepAccounting,
    StepTimeline,
    write_steps_json,
)
from capacity_plugins.rehearsal.watch import SelfWatch
from capacity_plugins.swarm import messages
from capacity_plugins.swarm.deadman import DEFAULT_REJOIN_S
from capacity_plugins.telemetry.wiring import RunTelemetry

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.client.events import CapacityEvents
    from capacity_plugins.rehearsal.source import RequestSource
    from capacity_plugins.scenario import Scenario
    from capacity_plugins.swarm.membership import SwarmMembership

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 5.0
# A worker sends Watch every second: this long without one, it was not generating as planned.
SILENT_AFTER_S = 5.0
# The web UI analyses each test when it stops, after the workers' last record batches (≤ 1 s apart).
UI_ANALYSIS_DELAY_S = 2.5
# The live view's rows: a step drained this long ago has had its last records (batches ≤ 1 s
# apart); its row is kept rather than recomputed at every refresh.
LIVE_ROW_FINAL_S = 5.0
# A running step's row reads every CPU and loop-lag sample of the run (StepAccounting.row): for the
# live view it is recomputed at most this often, however many browsers poll.
LIVE_ROW_REFRESH_S = 5.0
# The live view's swarm health: a generator whose last Watch is older than this is late.
LATE_AFTER_S = 2.5
# ... and the event-loop lag shown is over this many recent seconds.
LIVE_LAG_WINDOW_S = 10.0


class _QuietHighSpawnRate(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


class StepAuthority:
    def __init__(self, environment: Environment, scenario: Scenario, results: ResultsFolder, source: RequestSource,
                 generator: GeneratorSide | None, ready: Callable[[], bool] = lambda: True,
                 membership: SwarmMembership | None = None) -> None:
        self.env = environment
        self.source = source  # the run's corpus (a cache probe describes its arm from it)
        self.membership = membership  # the master's view of its workers (None on a local runner)
        self.scenario = scenario
        self.results = results
        self.runner: Any = environment.runner
        self.events: CapacityEvents = environment.capacity_events  # type: ignore[attr-defined]
        # The local runner generates load itself; a master hears from its workers instead.
        self.generator = generator
        self.master = generator is None
        self.ready = ready  # every worker applied the test's setup (the master's handshake)
        self.plans: list[StepPlan] = plan_steps(scenario)
        self.timeline = generator.timeline if generator is not None else StepTimeline()
        # The load kind's chooser of further steps (a capacity search's levels), or None.
        self.next_steps: NextSteps | None = scenario.load.next_steps(scenario)
        self.described: dict[str, Any] = {}  # what the load kind adds to meta.json and steps.json
        # Workload classes: a step's window runs on until its thinnest class has load.min_requests.
        self.class_names = [c.name for c in scenario.workload_classes]
        self.accounting = self._new_accounting()
        self.watch_last: dict[int, tuple[float, int]] = {}  # worker → (unix, in flight) of its last Watch
        # Silences between two Watch arrivals (the master's clock): a worker cut off for a while
        # whose queued reports all arrive once the link is back still stopped reporting meanwhile.
        self.watch_arrived: dict[int, float] = {}
        self.watch_gaps: list[tuple[int, float, float]] = []  # (worker, from, to), longer than SILENT_AFTER_S
        # The master's own loop: it sends no requests, but a late master delays heartbeats and steps.
        self.master_watch = SelfWatch("master") if self.master else None
        self.step_workers: dict[int, list[int]] = {}  # step → workers connected when it started
        self.telemetry = RunTelemetry(scenario, environment.host, lambda t: self.timeline.lookup(t)[0])
        # What meta.json learns from the rehearsal (written into it on `writing_meta`).
        self.meta = Meta()
        self.shape: RehearsalShape | None = None
        self._progress: Any = None
        self._live_rows: dict[tuple[int, float], dict[str, Any]] = {}  # finished steps' rows, for the live view
        self._live_recent: dict[tuple[int, float], tuple[float, dict[str, Any]]] = {}  # (when, row) of the others
        # A re-run waits for these workers (those of the step it repeats) to report again.
        self._rerun_awaits: set[int] = set()
        self.reruns: list[dict[str, Any]] = []  # meta.json `reruns`: each re-run and why

    def _new_accounting(self) -> StepAccounting:
        return StepAccounting(self.timeline, ClientLimits.from_load(self.scenario.load),
                              keep_slo_views=self.next_steps is not None)

    def _next_plan(self, finished: Step) -> StepPlan | None:
        """The load kind's next step (a capacity search's), judged from the finished one (contracts/slo.py)."""
        chooser = self.next_steps
        if chooser is None:
            return None
        unit = chooser.unit
        invalid = self._invalid_reason(finished)
        if invalid is not None:
            chooser.halt(finished.level, invalid)
            print(f"[capacity] search: {finished.level:g} {unit} → invalid ({invalid}); done: the search cannot "
                  "steer by a step that decides nothing", flush=True)
            self.meta.update_from(Meta.model_validate(chooser.meta()))
            return None
        views, requests, errors = self.accounting.slo_sample(finished.index)
        classes = self.scenario.workload_classes
        if classes:
            # Workload classes: the step is judged as the mix, each class by its own SLO (as the analysis does).
            got = self.accounting.class_samples(finished.index)
            samples = {c.name: (*got.get(c.name, ({}, 0, 0)), c.slo) for c in classes}
            judged, limiting = judge_mix(samples, self.scenario.load.min_requests, self.scenario.verdict.confidence)
        else:
            judged, limiting = judge_step(views, requests, errors, self.scenario.slo,
                                          self.scenario.verdict.confidence)
        if requests < self.scenario.load.min_requests and judged == "pass":
            # too few requests to claim a pass (the analysis calls the step insufficient)
            judged, limiting = "uncertain", f"{requests} requests < load.min_requests {self.scenario.load.min_requests}"
        spent = time.time() - (self.timeline.steps[0].start_unix if self.timeline.steps else time.time())
        plan = chooser.next(finished.level, judged, limiting, spent_s=spent)
        print(f"[capacity] search: {finished.level:g} {unit} → {judged}"
              + (f" ({limiting})" if limiting else "")
              + (f"; next {plan.level:g}" if plan is not None else f"; done: {chooser.stopped}"), flush=True)
        self.meta.update_from(Meta.model_validate(chooser.meta()))
        return extended(plan, self.scenario.load) if plan is not None else None

    def _rerun(self, drained: Step) -> StepPlan | None:
        """The same step again when a change of the swarm (a worker lost, silent, joined, rejoined)
        made it invalid: a transient cut must not cost the decision. At most load.max_reruns per
        planned step; the re-run starts once every worker of that step reports again (`_ready`)."""
        if not self.master or drained.interrupted:
            return None
        # again at the drain's end: a worker lost or back after the window closed (a cut that
        # began in the window) changed the step as much
        self._check_membership(drained, time.time())
        row = self.accounting.row(drained)
        if not row.get("membership_changed"):
            return None
        reason = str(row.get("membership_reason") or "the swarm changed")
        original = drained.rerun_of if drained.rerun_of is not None else drained.index
        done = sum(1 for st in self.timeline.steps if st.rerun_of == original)
        limit = self.scenario.load.max_reruns
        if done >= limit:
            print(f"[capacity] step {drained.index + 1}: invalid (swarm changed: {reason}); "
                  f"no re-run left (load.max_reruns {limit})", flush=True)
            return None
        self._rerun_awaits = set(self.step_workers.get(drained.index, []))
        print(f"[capacity] step {drained.index + 1}: invalid (swarm changed: {reason}); re-running it at "
              f"{drained.level:g} once every worker is back (re-run {done + 1} of at most {limit})", flush=True)
        return replace(self.plans[drained.index], rerun_of=original, rerun_reason=reason)

    def _ready(self) -> bool:
        """Every generator applied the setup and, before a re-run, every worker of the step it
        repeats is connected and reported in the last SILENT_AFTER_S / 2 seconds."""
        if not self.ready():
            return False
        if not self._rerun_awaits:
            return True
        if self.membership is not None:
            self.membership.check()  # a rejoin is noticed before the re-run starts, not inside it
        now = time.time()
        connected = set(self._connected_workers())
        fresh = {w for w in connected if now - self.watch_last.get(w, (0.0, 0))[0] < SILENT_AFTER_S / 2}
        return self._rerun_awaits <= fresh

    def _invalid_reason(self, finished: Step) -> str | None:
        """Why the analysis will call this step invalid, judged from the same row steps.json gets."""
        self._collect_local()
        row = self.accounting.row(finished)
        if row.get("client_limited"):
            return f"client limited: {row.get('client_limited_reason')}"
        if row.get("membership_changed"):
            return f"swarm membership changed: {row.get('membership_reason')}"
        return "interrupted" if row.get("interrupted") else None

    # -- wiring ------------------------------------------------------------------------------------------
    def attach(self) -> None:
        env, sc = self.env, self.scenario
        drain = sc.drain_timeout_s
        # Users finish their request when a step ramps down (--stop-timeout); the shape bounds the wait.
        env.stop_timeout = max(float(env.stop_timeout or 0), drain + 1.0)
        self.shape = RehearsalShape(
            self.plans,
            drain_timeout_s=drain,
            in_flight=self._in_flight_since,
            measured=self._measured_for_window,
            next_plan=self._next_plan,
            rerun=self._rerun,
            # a worker away longer than its own rejoin window has given up (swarm/deadman.py)
            rerun_wait_s=DEFAULT_REJOIN_S,
            ready=self._ready,
            users_running=lambda: int(self.runner.user_count),
            settle_s=2.0 if self.master else 0.0,
            on_step_start=self._on_step_start,
            on_window_end=self._on_window_end,
            on_window_extended=self._on_window_extended,
            on_drain_end=self._on_drain_end,
            on_finished=self._on_finished,
            on_reset=self._on_reset,
        )
        self.shape.runner = self.runner
        env.shape_class = self.shape
        env.capacity_steps = self  # type: ignore[attr-defined]  # the live view reads live_rows / live_swarm
        # Drains stop every user at once on purpose (see shapes._drain_tuple); Locust's warning
        # about spawn rates > 100 would print at every step and hide the progress lines.
        logging.getLogger("locust.runners").addFilter(_QuietHighSpawnRate())
        self.events.record.add_listener(self.accounting_add)
        self.events.writing_meta.add_listener(lambda meta, **_: meta.update_from(self.meta))
        self.telemetry.attach(env)  # the live view reads its latest readings
        meta = self.meta
        meta.scenario, meta.load_kind, meta.steps_planned, meta.complete = sc.name, sc.load.kind, len(self.plans), False
        if self.master:
            messages.on(self.runner, messages.Watch, self._on_watch)
            env.events.test_stopping.add_listener(self._on_master_stopping)
            assert self.master_watch is not None
            self.master_watch.start()
        env.events.test_stopping.add_listener(self._clip_interrupted)
        env.events.quitting.add_listener(self._on_quitting)
        if not getattr(env.parsed_options, "headless", False):
            env.events.test_stop.add_listener(self._on_ui_test_stop)
        if self.source.corpus is not None:
            self.described = sc.load.describe(sc, self.source.corpus)
            self.meta.update_from(Meta.model_validate(self.described))
        self.events.results_switched.add_listener(self._restart_telemetry)
        self.results.write_scenario_copy()
        self._restart_telemetry(self.results.path)

    def _restart_telemetry(self, folder: Any, **_: Any) -> None:
        self.telemetry.stop()
        self.telemetry.start(folder)

    # -- inputs ------------------------------------------------------------------------------------------
    def accounting_add(self, record: Any, **_: Any) -> None:
        self.accounting.add_record(record)

    def _on_watch(self, w: messages.Watch) -> None:
        self.watch_last[w.worker] = (w.unix, w.in_flight)
        arrived, before = time.time(), self.watch_arrived.get(w.worker)
        if before is not None and arrived - before > SILENT_AFTER_S:
            self.watch_gaps.append((w.worker, before, arrived))
        self.watch_arrived[w.worker] = arrived
        name = f"worker-{w.worker}"
        for unix, cpu, _rss in w.cpu:
            self.accounting.add_cpu(name, unix, cpu)
        for unix, lag in w.loop_lag:
            self.accounting.add_loop_lag(name, unix, lag)
        self.telemetry.client_rows(name, w.host, w.cpu, w.loop_lag)
        for step, counters in w.steps.items():
            self.accounting.set_counters(name, step, counters)

    def _connected_workers(self) -> list[int]:
        if self.membership is not None:
            return self.membership.connected()
        return []

    def _check_membership(self, step: Step, now: float) -> None:
        """A worker lost, joined or silent during the step's window makes the step invalid."""
        membership = self.membership
        if membership is None:
            return
        membership.check(now)
        began = self.step_workers.get(step.index, [])
        for lost in membership.lost_between(step.start_unix, now):
            self.accounting.note_membership(step.index, f"worker {lost['worker']} lost ({lost['reason']})")
        for joined in membership.joined_between(step.start_unix, now):
            self.accounting.note_membership(step.index, f"worker {joined} joined during the step")
        for back in membership.rejoined_between(step.start_unix, now):
            self.accounting.note_membership(step.index, f"worker {back} rejoined during the step")
        for w in began:
            last = self.watch_last.get(w, (step.start_unix, 0))[0]
            if now - last > SILENT_AFTER_S and now > step.warmup_end_unix:
                self.accounting.note_membership(step.index, f"worker {w} stopped reporting for {now - last:.0f} s")
        for w, gap_from, gap_to in self.watch_gaps:
            if w in began and gap_from < min(now, step.end_unix) and gap_to > step.warmup_end_unix:  # the window
                self.accounting.note_membership(step.index, f"worker {w} stopped reporting for {gap_to - gap_from:.0f} s")

    def _in_flight_since(self, since: float) -> int | None:
        if self.generator is not None:
            self._collect_local()
            return self.generator.in_flight()
        total = 0
        for w in self._connected_workers():
            last = self.watch_last.get(w)
            if last is None or last[0] <= since:
                return None  # this worker has not reported since the drain began
            total += last[1]
        return total

    def _collect_local(self) -> None:
        """This process's own watch: the generator's (local runner) or the master's loop lag."""
        if self.master_watch is not None:
            lag = self.master_watch.new_lag()
            for unix, ms in lag:
                self.accounting.add_master_lag(unix, ms)
            # not a generator's CPU (it judges no step), but worth seeing next to theirs
            self.telemetry.client_rows("master", HOST, self.master_watch.new_cpu(), lag)
        if self.generator is None:
            return
        watch = self.generator.watch
        cpu, lag = watch.new_cpu(), watch.new_lag()
        for unix, pct, _rss in cpu:
            self.accounting.add_cpu("local", unix, pct)
        for unix, ms in lag:
            self.accounting.add_loop_lag("local", unix, ms)
        self.telemetry.client_rows("local", HOST, cpu, lag)
        for step, counters in self.generator.step_counters().items():
            self.accounting.set_counters("local", step, counters)

    # -- shape callbacks -----------------------------------------------------------------------------------
    def _plan(self, index: int) -> ArrivalPlan | None:
        p = self.plans[index]
        if not p.open_loop:
            return None
        if p.trace is not None:  # a trace window: its own arrivals and requests, not a random schedule
            return ArrivalPlan(arrival="constant", rate=float(p.target_rps or 0.0), duration_s=p.duration_s,
                               offsets=p.trace.offsets, requests=p.trace.requests, block_tokens=p.block_tokens,
                               sessions=p.sessions)
        return ArrivalPlan(
            arrival=p.arrival,
            rate=float(p.target_rps or 0.0),
            duration_s=p.longest_s,  # arrivals for the longest the window may run (min_requests)
            cv=p.cv,
            seed=p.seed,
            ramp_s=p.ramp_s,
        )

    def _on_step_start(self, step: Step) -> None:
        plan = self._plan(step.index)
        p = self.plans[step.index]
        if plan is not None:
            step.offered = offered_in_window(plan.schedule(step.index), p.warmup_s, p.duration_s)
        self.timeline.upsert(step)
        self.step_workers[step.index] = self._connected_workers()
        if step.rerun_of is not None:
            self._rerun_awaits = set()
            self.reruns.append({"step": step.index, "rerun_of": step.rerun_of, "level": step.level,
                                "reason": step.rerun_reason})
            self.meta.reruns = list(self.reruns)
        unit = "rps" if p.open_loop else "users"
        print(
            f"[capacity] step {step.index + 1}/{len(self.plans)}: {step.kind} {step.level:g} {unit} "
            + (f"(re-run of step {step.rerun_of + 1}) " if step.rerun_of is not None else "")
            + (f"({step.arm} arm) " if step.arm else "")
            + f"for {p.duration_s:g} s (first {p.warmup_s:g} s warmup)",
            flush=True,
        )
        if self.generator is not None:
            self.generator.step_started(step, plan, 0, 1)
        else:
            workers = self._connected_workers()
            if plan is not None and p.users < len(workers):
                # Each worker gets 1/n of the arrivals but Locust gives some of them no user: those
                # arrivals wait forever and the step is (rightly) flagged client_limited.
                log.warning("load.max_concurrency %d < %d workers: raise it to at least one user per worker",
                            p.users, len(workers))
            messages.send(self.runner, messages.StepStarted(
                step=step.to_message(), plan=asdict(plan) if plan is not None else None,
                shards={w: k for k, w in enumerate(workers)}, shard_count=len(workers) or 1,
            ))
        if self._progress is None:
            self._progress = gevent.spawn(self._progress_loop)
        self.events.step_started.fire(step=step)

    def _announce(self, step: Step) -> None:
        if self.generator is not None:
            self.generator.step_updated(step)
        else:
            messages.send(self.runner, messages.StepUpdated(step=step.to_message()))

    def _measured_for_window(self, index: int) -> int:
        """The measured requests that decide whether a step's window runs on: with workload classes
        the thinnest class's (each class is insufficient below load.min_requests on its own)."""
        if self.class_names:
            return self.accounting.thinnest_class(index, self.class_names)[1]
        return self.accounting.measured(index)

    def _on_window_extended(self, step: Step) -> None:
        p = self.plans[step.index]
        have = self.accounting.measured(step.index)
        if self.class_names:
            name, n = self.accounting.thinnest_class(step.index, self.class_names)
            have_s = f"{n} of {p.min_requests} measured requests of class {name} (the thinnest)"
        else:
            have_s = f"{have} of {p.min_requests} measured requests"
        print(f"[capacity] step {step.index + 1}/{len(self.plans)}: {have_s}; "
              f"window extended to {step.end_unix - step.start_unix:.0f} s", flush=True)
        self._announce(step)

    def _on_window_end(self, step: Step) -> None:
        plan = self._plan(step.index)
        if plan is not None:  # offered = arrivals scheduled in the window as it finally ran
            step.offered = offered_in_window(plan.schedule(step.index), self.plans[step.index].warmup_s,
                                             step.end_unix - step.start_unix)
        self._check_membership(step, time.time())
        self._announce(step)

    def _on_drain_end(self, step: Step) -> None:
        self._announce(step)
        self.write_steps()
        self.events.step_ended.fire(step=step)

    def _on_finished(self) -> None:
        self.timeline.finished = True
        self.meta.complete = True
        if self.generator is not None:
            self.generator.finished()
        else:
            messages.send(self.runner, messages.StepsFinished())
        print(f"[capacity] all {len(self.plans)} steps done", flush=True)

    def _on_reset(self) -> None:
        # A new test from the web UI: a fresh timeline, and a fresh results folder when the previous
        # test used this one. Reset the timeline before switching: switching restarts telemetry,
        # which yields to the hub, and the shape's first tick of the new test may run meanwhile;
        # its step 0 must land on the fresh timeline, not be wiped by a late clear.
        used = bool(self.timeline.steps)
        self.timeline.steps.clear()
        self.timeline.finished = False
        self.next_steps = self.scenario.load.next_steps(self.scenario)
        self.accounting = self._new_accounting()
        self._live_rows.clear()
        self._live_recent.clear()
        self.reruns, self._rerun_awaits = [], set()
        self.watch_gaps.clear()
        if used:
            self.results.switch()
        self.meta.complete = False
        if self.master:
            messages.send(self.runner, messages.StepsReset())

    def _on_master_stopping(self, **_: Any) -> None:
        # The drains are over (or cut short): MasterRunner.stop() waits stop_timeout + 60 s for the
        # workers, which must not inherit the long drain timeout the rehearsal raised it to.
        if self.timeline.steps:
            self.env.stop_timeout = 0

    def _on_ui_test_stop(self, **_: Any) -> None:
        """Web UI: a test ended (finished or stopped) — write its steps.json and analyse its folder."""
        if not self.timeline.steps:
            return
        self._clip_interrupted()
        self.write_steps()
        gevent.spawn_later(UI_ANALYSIS_DELAY_S, analyse_in_background, self.results.path)

    def _progress_loop(self) -> None:
        try:
            while self.shape is not None and not self.shape.finished:
                gevent.sleep(PROGRESS_INTERVAL_S)
                self._collect_local()  # this process's own CPU / loop lag into the live view
                step = self.shape.current
                if step is None or self.shape.finished or self.runner.state not in ("spawning", "running"):
                    continue
                n, ttft = self.accounting.progress(step.index)
                ttft_s = f"{ttft:.0f} ms" if ttft is not None else "-"
                print(
                    f"[capacity] step {step.index + 1}/{len(self.plans)} ({step.level:g} "
                    f"{'rps' if step.target_rps is not None else 'users'}, {self.shape.phase}): "
                    f"{n} requests, TTFT p95 {ttft_s}",
                    flush=True,
                )
        finally:
            self._progress = None

    # -- the live view (webui/ reads these through environment.capacity_steps) ---------------------------------
    def live_rows(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """steps.json's rows so far, the running step's as measured so far, each with `measured`
        (requests measured in its window) and `min_requests` (its load.min_requests): the same
        validity the authority writes, for the live view. A step drained `LIVE_ROW_FINAL_S` ago is
        kept, not recomputed at every refresh (its records have all arrived)."""
        now = time.time() if now_unix is None else now_unix
        self._collect_local()
        out = []
        for step in list(self.timeline.steps):
            key = (step.index, step.start_unix)
            row = self._live_rows.get(key)
            fresh = self._live_recent.get(key)
            if row is None and fresh is not None and now - fresh[0] < LIVE_ROW_REFRESH_S:
                row = fresh[1]
            if row is None:
                row = self.accounting.row(step)
                row["measured"] = self.accounting.measured(step.index)
                row["min_requests"] = self.plans[step.index].min_requests if step.index < len(self.plans) else 0
                if step.drain_end_unix is not None and now - step.drain_end_unix > LIVE_ROW_FINAL_S:
                    self._live_rows[key] = row
                    self._live_recent.pop(key, None)
                else:
                    self._live_recent[key] = (now, row)
            out.append(row)
        return out

    def live_swarm(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """Each generator process as the authority hears it: when it last reported (a worker's
        Watch, ≥ 1 Hz), late (no report for LATE_AFTER_S) or silent (SILENT_AFTER_S: a step it ran
        in is invalid), requests in flight, and its event-loop lag over the last LIVE_LAG_WINDOW_S.
        The master's own loop is listed too (it sends nothing, but a late master delays steps)."""
        now = time.time() if now_unix is None else now_unix
        self._collect_local()
        since = now - LIVE_LAG_WINDOW_S

        def lag(samples: list[tuple[float, float]]) -> tuple[float | None, float | None]:
            return StepAccounting.lag_in(samples[-int(LIVE_LAG_WINDOW_S * 40):], since, now)

        out: list[dict[str, Any]] = []
        if self.generator is not None:
            p99, top = lag(self.accounting.loop_lag.get("local", []))
            out.append({"process": "local", "worker": None, "age_s": 0.0, "health": "ok",
                        "in_flight": self.generator.in_flight(), "loop_lag_p99_ms": p99, "loop_lag_max_ms": top})
        for w, (unix, in_flight) in sorted(self.watch_last.items()):
            age = max(0.0, now - unix)
            health = "silent" if age > SILENT_AFTER_S else "late" if age > LATE_AFTER_S else "ok"
            p99, top = lag(self.accounting.loop_lag.get(f"worker-{w}", []))
            out.append({"process": f"worker-{w}", "worker": w, "age_s": age, "health": health,
                        "in_flight": in_flight, "loop_lag_p99_ms": p99, "loop_lag_max_ms": top})
        if self.master:
            p99, top = StepAccounting.lag_in(self.accounting.master_lag[-int(LIVE_LAG_WINDOW_S * 40):], since, now)
            out.append({"process": "master", "worker": None, "age_s": 0.0, "health": "ok", "in_flight": None,
                        "loop_lag_p99_ms": p99, "loop_lag_max_ms": top})
        return out

    # -- outputs ---------------------------------------------------------------------------------------------
    def write_steps(self) -> None:
        self._collect_local()
        try:
            path = self.results.path / "steps.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            extra: dict[str, Any] = {"scenario": self.scenario.name}
            if self.next_steps is not None:
                extra.update(self.next_steps.meta())
            extra.update(self.described)
            write_steps_json(path, self.accounting.document(extra))
        except Exception:
            log.exception("writing steps.json failed")

    def _clip_interrupted(self, **_: Any) -> None:
        """A stop before the shape finished: the running step's window ends now, not when planned,
        so its rates are per second actually measured."""
        if self.timeline.finished or self.shape is None or self.shape.current is None:
            return
        step = self.shape.current
        now = time.time()
        if step.drain_end_unix is None:
            step.end_unix = max(min(step.end_unix, now), step.warmup_end_unix)
            step.drain_end_unix = now
            step.interrupted = True
            plan = self._plan(step.index)
            if plan is not None:  # offered = arrivals scheduled in the window actually measured
                p = self.plans[step.index]
                step.offered = offered_in_window(plan.schedule(step.index), p.warmup_s, step.end_unix - step.start_unix)
            self.events.step_ended.fire(step=step)

    def _on_quitting(self, **_: Any) -> None:
        self._clip_interrupted()
        current = self.shape.current if self.shape is not None else None
        if current is not None:
            self._check_membership(current, min(time.time(), current.end_unix))
        self.meta.complete, self.meta.steps_run = self.timeline.finished, len(self.timeline.steps)
        if not self.timeline.finished:
            self.meta.incomplete_reason = "stopped before the last step finished (interrupted)"
        self.write_steps()
        if self.master_watch is not None:
            self.master_watch.stop()
        telemetry = self.telemetry.stop()
        if telemetry is not None:
            self.meta.telemetry = Telemetry.model_validate(telemetry)
