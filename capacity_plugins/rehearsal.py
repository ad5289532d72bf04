"""Locust-side wiring of a scenario: `--scenario FILE` turns a plain LLM run into a rehearsal.

    from capacity_plugins import rehearsal
    rehearsal.install()        # in a locustfile, instead of (or before) plugin.install()

Per process, after the measurement plugin has built `environment.capacity`:

- local / master (the authority): loads the scenario, fills the plugin's options from it (options
  given explicitly on the command line win), sets `environment.shape_class` to a RehearsalShape —
  only when a scenario is given, so plain -u/-r/-t keep working — keeps the step timeline, counts
  every finished record into its step, prints progress, writes scenario.yaml and steps.json (after
  every step and at the end, so an interrupted run still has one).
- master → workers: each step (and its open-loop arrival plan) goes out as a `capacity_step`
  message before the users for it are dispatched (ZeroMQ keeps the order), so workers need no
  scenario file of their own.
- every generator process (local or worker): tags records through the timeline, runs the pacer
  for open-loop steps (its shard k of n of the one global schedule), and watches itself ≥ 1 Hz
  (CPU % from a native-thread sampler, requests in flight, pacer cap hits); workers ship that to
  the master as `capacity_watch` messages, and the master's shape ends a drain only when every
  worker reported nothing in flight after the drain began.
- stop: on an interrupted run (Ctrl-C / SIGTERM before the shape finished) users are stopped at
  once, so in-flight requests are recorded as `cancelled`, and meta.json says `complete: false`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import locust
from locust.runners import MasterRunner, WorkerRunner

from capacity_plugins.arrivals import Pacer, offered_in_window, schedule, shard
from capacity_plugins.errors import UserError
from capacity_plugins.scenario import Scenario, load_scenario
from capacity_plugins.shapes import RehearsalShape, StepPlan, plan_steps
from capacity_plugins.signals import route_to_main_greenlet
from capacity_plugins.steps import Step, StepAccounting, StepTimeline, write_steps_json

log = logging.getLogger(__name__)

MSG_STEP = "capacity_step"
_HOST = socket.gethostname()
MSG_WATCH = "capacity_watch"
WATCH_INTERVAL_S = 1.0
PROGRESS_INTERVAL_S = 5.0
_installed_on: set[int] = set()


# -- installation ---------------------------------------------------------------------------------------


def install(events: Any = None) -> None:
    """Register `--scenario` and the init listeners around the measurement plugin's (idempotent).

    Order matters: the scenario must fill the options before the plugin reads them (results folder,
    corpus, dialect), and the wiring needs the plugin's RunContext, so: ours, plugin's, ours.
    """
    from capacity_plugins import plugin

    events = events or locust.events
    if id(events) in _installed_on:
        return
    _installed_on.add(id(events))
    events.init_command_line_parser.add_listener(_on_parser)
    plugin_first = id(events) in plugin._installed_on
    if plugin_first:
        # The locustfile installed the plugin before us: put the options step in front of it.
        events.init._handlers.insert(0, _apply_scenario_options)
    else:
        events.init.add_listener(_apply_scenario_options)
        plugin.install(events)
    events.init.add_listener(_on_init)


def _on_parser(parser: Any, **_: Any) -> None:
    parser.add_argument(
        "--scenario",
        default="",
        include_in_web_ui=False,
        help="Capacity rehearsal YAML (scenarios/*.yaml): load shape, arrivals, request settings, SLO",
    )


# -- scenario → plugin options ---------------------------------------------------------------------------

# Plugin option dest → value from the scenario. Applied only where the option still has its default.
def scenario_options(s: Scenario) -> dict[str, Any]:
    r = s.request
    return {
        "dialect": s.target.dialect,
        "model": s.target.model or "",
        "corpus": s.corpus_path(),
        "min_distinct": s.corpus.min_distinct,
        "sampling": s.corpus.sampling,
        "seed": s.corpus.seed,
        "max_tokens": r.max_tokens,
        "no_stream": not r.stream,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "request_timeout": r.timeout_s,
        "ignore_eos": r.ignore_eos,
        "no_usage": not r.usage,
        "tokenizer": s.tokenizer_path(),
        "retries": r.retries,
        "api_key_env": s.target.api_key_env or "",
        "header": [f"{k}:{v}" for k, v in s.target.headers.items()],
        "insecure": s.target.insecure,
    }


def scenario_cli_args(s: Scenario) -> list[str]:
    """The same options as Locust command-line flags (what `capacity run` passes explicitly)."""
    args: list[str] = []
    for dest, value in scenario_options(s).items():
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, list):
            for item in value:
                args += [flag, item]
        elif value is not None and value != "":
            args += [flag, str(value)]
    return args


def _option_defaults() -> dict[str, Any]:
    from capacity_plugins.options import add_arguments

    p = argparse.ArgumentParser(add_help=False)

    class _Shim:  # Locust's add_argument takes web-UI keywords plain argparse does not know
        def add_argument(self, *a: Any, **kw: Any) -> None:
            for k in ("include_in_web_ui", "is_secret", "is_required", "is_multiple", "env_var"):
                kw.pop(k, None)
            p.add_argument(*a, **kw)

    add_arguments(_Shim())
    return vars(p.parse_args([]))


def fill_options(opts: Any, scenario: Scenario) -> None:
    """Set the plugin's options from the scenario where they still hold their defaults (a flag given
    on the command line wins), and give the run its own results folder under the scenario's output."""
    defaults = _option_defaults()
    for dest, value in scenario_options(scenario).items():
        if getattr(opts, dest, None) == defaults.get(dest):
            setattr(opts, dest, value)
    if getattr(opts, "results_dir", None) == defaults.get("results_dir"):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        opts.results_dir = str(Path(scenario.output) / f"{scenario.name}-{stamp}")


def _apply_scenario_options(environment: Any, **_: Any) -> None:
    opts = environment.parsed_options
    path = getattr(opts, "scenario", "") if opts is not None else ""
    if not path:
        return
    try:
        scenario = load_scenario(path)
    except UserError as e:
        sys.stderr.write(f"capacity: {e}\n")
        sys.stderr.flush()
        sys.exit(2)
    environment.capacity_scenario = scenario
    if isinstance(environment.runner, WorkerRunner):
        return  # a worker takes the master's options and steps from its messages
    fill_options(opts, scenario)
    ignored = [f for f, v in (("-u", opts.num_users), ("-r", opts.spawn_rate), ("-t", opts.run_time)) if v]
    if ignored:
        log.warning("%s: ignored with --scenario (the scenario's load section decides users and duration)",
                    ", ".join(ignored))
    if not scenario.target.embedded and not environment.host:
        environment.host = scenario.target.url
        opts.host = scenario.target.url


# -- the wiring --------------------------------------------------------------------------------------------


def _on_init(environment: Any, **_: Any) -> None:
    ctx = getattr(environment, "capacity", None)
    if ctx is None or environment.runner is None:
        return
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        WorkerSide(environment, ctx).attach()
        return
    scenario: Scenario | None = getattr(environment, "capacity_scenario", None)
    if scenario is None:
        return
    if scenario.target.embedded and not environment.host:
        sys.stderr.write("capacity: target.url is embedded; start it with `capacity run`, or pass --host URL\n")
        sys.exit(2)
    Authority(environment, ctx, scenario).attach()


class _QuietHighSpawnRate(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


def _analyse_in_background(folder: Path) -> None:
    """`capacity analyze FOLDER` in a child process: pandas/matplotlib stay out of the Locust hub."""
    import subprocess

    try:
        r = subprocess.run(
            [sys.executable, "-m", "capacity_plugins", "analyze", str(folder)], capture_output=True, text=True, timeout=600
        )
        if r.returncode == 0:
            print(f"[capacity] analysed: {folder / 'report.html'}", flush=True)
        else:
            print(f"[capacity] analysis of {folder} failed: {r.stderr.strip()[-300:]}", flush=True)
    except Exception as e:  # never let the analysis take the UI down
        print(f"[capacity] analysis of {folder} failed: {e}", flush=True)


@dataclass(frozen=True)
class _Target:
    url: str
    kind: str | None = None


@dataclass(frozen=True)
class _Telemetry:
    scrape: list[Any]
    nvml: bool
    interval_s: float


def _schedule_for(plan: dict[str, Any], index: int) -> Any:
    return schedule(
        plan["arrival"], plan["rate"], plan["duration_s"], cv=plan["cv"], seed=plan["seed"], step=index,
        ramp_s=plan["ramp_s"],
    )


class _Watcher:
    """This process's CPU (native-thread sampler, ≥ 1 Hz) plus what is in flight."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sampler: Any = None
        self._last = 0.0
        try:
            from capacity_plugins.telemetry.client import ClientSampler

            self.sampler = ClientSampler(interval_s=WATCH_INTERVAL_S, device=name)
            self.sampler.start()
        except Exception:  # pragma: no cover - fallback when the telemetry part is absent
            import psutil

            self._proc = psutil.Process()
            self._proc.cpu_percent(None)

    def new_samples(self) -> list[tuple[float, float, float | None]]:
        """(unix, cpu %, RSS bytes) since the last call."""
        if self.sampler is not None:
            out = [
                (s["unix"], s["cpu_pct"], s.get("rss_bytes"))
                for s in self.sampler.samples_since(self._last)
                if s["unix"] > self._last
            ]
        else:  # greenlet sampling: late when the hub is busy, but cpu_percent covers the whole interval
            out = [(time.time(), float(self._proc.cpu_percent(None)), float(self._proc.memory_info().rss))]
        if out:
            self._last = out[-1][0]
        return out

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()


class _GeneratorSide:
    """What every generator process (local or worker) does: tag records, pace, stop cleanly."""

    def __init__(self, environment: Any, ctx: Any) -> None:
        self.env = environment
        self.ctx = ctx
        self.runner = environment.runner
        self.timeline = StepTimeline()
        self.pacer: Pacer | None = None

    def attach_generator(self) -> None:
        self.ctx.step_provider = self.timeline.lookup
        self.env.events.test_stopping.add_listener(self._on_test_stopping)

    def in_flight(self) -> int:
        # Open loop: users holding an arrival. Closed loop: running users (they stop after their request).
        if self.pacer is not None:
            return self.pacer.in_flight
        return int(self.runner.user_count)

    def step_started(self, step: Step, plan: dict[str, Any] | None, shard_index: int, shard_count: int) -> None:
        self.timeline.upsert(step)
        if plan is None:
            return
        if self.pacer is None:
            self.pacer = Pacer()
            self.ctx.pacer = self.pacer  # users read ctx.pacer at every iteration
        offsets = shard(_schedule_for(plan, step.index), shard_index, shard_count)
        self.pacer.begin(step.index, step.start_unix, offsets, step.warmup_end_unix)

    def step_updated(self, step: Step) -> None:
        self.timeline.upsert(step)
        if step.drain_end_unix is not None and self.pacer is not None and self.pacer.step == step.index:
            self.pacer.stop()

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


class WorkerSide(_GeneratorSide):
    def attach(self) -> None:
        self.attach_generator()
        self.watcher: _Watcher | None = None
        self.runner.register_message(MSG_STEP, self._on_step)
        self.env.events.quitting.add_listener(lambda **_: self.watcher and self.watcher.stop())

    def _on_step(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        data = msg.data
        if data.get("finished"):
            self.timeline.finished = True
            self.env.stop_timeout = 0  # drained; see _on_test_stopping
            return
        if data.get("reset"):
            self.timeline = StepTimeline()
            self.ctx.step_provider = self.timeline.lookup
            return
        step = Step.from_message(data["step"])
        if self.watcher is None:
            self.watcher = _Watcher(f"worker-{self.ctx.worker_index}")
            gevent.spawn(self._watch_loop)
        if data.get("started"):
            shards = data.get("shards") or {}
            k = shards.get(str(self.ctx.worker_index))
            if data.get("plan") is not None and k is None:
                log.warning("worker %s has no shard of step %s's arrivals", self.ctx.worker_index, step.index)
                self.timeline.upsert(step)
                return
            self.step_started(step, data.get("plan"), int(k or 0), int(data.get("n", 1)))
        else:
            self.step_updated(step)

    def _watch_loop(self) -> None:
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            try:
                assert self.watcher is not None
                pacer = {
                    str(i): st.as_message() for i, st in (self.pacer.stats.items() if self.pacer else ())
                }
                self.runner.send_message(
                    MSG_WATCH,
                    {
                        "worker": self.ctx.worker_index,
                        "host": _HOST,
                        "unix": time.time(),
                        "cpu": self.watcher.new_samples(),
                        "in_flight": self.in_flight(),
                        "pacer": pacer,
                    },
                )
            except Exception:
                log.exception("sending the self-watch report failed")


class Authority(_GeneratorSide):
    """Local or master process: owns the shape, the timeline and steps.json."""

    def __init__(self, environment: Any, ctx: Any, scenario: Scenario) -> None:
        super().__init__(environment, ctx)
        self.scenario = scenario
        self.master = isinstance(self.runner, MasterRunner)
        self.plans_list: list[StepPlan] = plan_steps(scenario)
        self.accounting = StepAccounting(
            self.timeline, scenario.load.max_schedule_lag_p99_ms, scenario.load.max_client_cpu_pct
        )
        self.watch_last: dict[int, tuple[float, int]] = {}
        self.pacer_by_worker: dict[tuple[int, int], dict[str, Any]] = {}
        self.watcher: _Watcher | None = None
        self.shape: RehearsalShape | None = None
        self._progress: Any = None

    def attach(self) -> None:
        env, sc = self.env, self.scenario
        drain = sc.drain_timeout_s
        # Users finish their request when a step ramps down (--stop-timeout); the shape bounds the wait.
        env.stop_timeout = max(float(env.stop_timeout or 0), drain + 1.0)
        self.shape = RehearsalShape(
            self.plans_list,
            drain_timeout_s=drain,
            in_flight=self._in_flight_since,
            settle_s=2.0 if self.master else 0.0,
            on_step_start=self._on_step_start,
            on_window_end=self._on_window_end,
            on_drain_end=self._on_drain_end,
            on_finished=self._on_finished,
            on_reset=self._on_reset,
        )
        self.shape.runner = self.runner
        env.shape_class = self.shape
        # Drains stop every user at once on purpose (see shapes._drain_tuple); Locust's warning
        # about spawn rates > 100 would print at every step and hide the progress lines.
        logging.getLogger("locust.runners").addFilter(_QuietHighSpawnRate())
        self.ctx.record_listeners.append(self._on_record)
        self.ctx.step_info = self.step_info
        self.ctx.extra_meta.update(
            {"scenario": sc.name, "load_kind": sc.load.kind, "steps_planned": len(self.plans_list), "complete": False}
        )
        if self.master:
            self.runner.register_message(MSG_WATCH, self._on_watch)
            env.events.test_stopping.add_listener(self._on_test_stopping)
        else:
            self.attach_generator()
            self.watcher = _Watcher("local")
        env.events.quitting.add_listener(self._on_quitting)
        env.events.test_stopping.add_listener(self._clip_interrupted)
        if not getattr(env.parsed_options, "headless", False):
            env.events.test_stop.add_listener(self._on_test_stop)
        self._write_scenario_copy()
        self._start_telemetry()
        # Locust installs its SIGTERM handler only after a headless shape run has ended
        # (main.start_automatic_run blocks in shape_greenlet.join() first), so a SIGTERM during the
        # rehearsal (Kubernetes, CI timeouts, `capacity run`) would kill the process without a stop:
        # no cancelled records, no meta.json. With the web UI, Locust's own SIGTERM handler is there.
        route_to_main_greenlet(sigterm=bool(getattr(env.parsed_options, "headless", False)))

    def step_info(self) -> dict[str, Any] | None:
        """The running step for live views (web UI tab, exporter); None before the first step."""
        shape = self.shape
        if shape is None or shape.current is None:
            return None
        step = shape.current
        return {
            "step": step.index,
            "of": len(self.plans_list),
            "level": step.level,
            "unit": "rps" if step.target_rps is not None else "users",
            "target_rps": step.target_rps,
            "phase": shape.phase,
        }

    def _start_telemetry(self) -> None:
        """Scrape the scenario's endpoints (and the embedded simulator's /metrics) into the results folder."""
        self.telemetry: Any = None
        tcfg = self.scenario.telemetry
        targets: list[Any] = list(tcfg.scrape)
        if self.scenario.target.embedded and self.env.host:
            targets.append(_Target(self.env.host.rstrip("/") + "/metrics", "simulator"))
        if not targets and not tcfg.nvml:
            return
        try:
            from capacity_plugins.telemetry.collector import collector_from_config
        except ImportError:  # pragma: no cover - the telemetry part is optional
            return
        cfg = _Telemetry(scrape=targets, nvml=tcfg.nvml, interval_s=tcfg.interval_s)
        try:
            self.telemetry = collector_from_config(
                cfg, out_dir=Path(self.ctx.results_dir), step_of=lambda t: self.timeline.lookup(t)[0]
            )
            self.telemetry.start()
            self.ctx.telemetry = self.telemetry
        except UserError as e:
            sys.stderr.write(f"capacity: {e}\n")
            sys.exit(2)
        except Exception:
            log.exception("telemetry collector did not start; the run goes on without it")
            self.telemetry = None

    def _client_cpu_rows(self, device: str, samples: list[tuple[float, float, float | None]], host: str) -> None:
        """The generator's own CPU and memory next to the server's, so a client bottleneck shows."""
        if getattr(self, "telemetry", None) is None or not samples:
            return
        rows = []
        for u, cpu, rss in samples:
            step = self.timeline.lookup(u)[0]
            base = {"unix": u, "step": step, "host": host, "device": device}
            rows.append({**base, "series": "client_cpu_pct", "value": cpu, "unit": "%"})
            if rss is not None:
                rows.append({**base, "series": "client_rss_bytes", "value": rss, "unit": "bytes"})
        try:
            self.telemetry.add_series_rows(rows)
        except Exception:
            log.debug("client CPU rows not written", exc_info=True)

    # -- inputs ------------------------------------------------------------------------------------------
    def _on_record(self, record: Any) -> None:
        self.accounting.add_record(record)

    def _on_watch(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        d = msg.data
        w = int(d["worker"])
        self.watch_last[w] = (float(d["unix"]), int(d["in_flight"]))
        samples = [(float(u), float(c), (float(r[0]) if r and r[0] is not None else None)) for u, c, *r in d.get("cpu", ())]
        for unix, cpu, _rss in samples:
            self.accounting.add_cpu(f"worker-{w}", unix, cpu)
        self._client_cpu_rows(f"worker-{w}", samples, str(d.get("host") or f"worker-{w}"))
        for step, st in (d.get("pacer") or {}).items():
            self.pacer_by_worker[(w, int(step))] = st

    def _in_flight_since(self, since: float) -> int | None:
        if not self.master:
            self._collect_local()
            return self.in_flight()
        workers = [self.runner.get_worker_index(c.id) for c in self.runner.clients.all if c.state != "missing"]
        total = 0
        for w in workers:
            last = self.watch_last.get(w)
            if last is None or last[0] <= since:
                return None  # this worker has not reported since the drain began
            total += last[1]
        return total

    def _collect_local(self) -> None:
        if self.watcher is not None:
            samples = self.watcher.new_samples()
            for unix, cpu, _rss in samples:
                self.accounting.add_cpu("local", unix, cpu)
            self._client_cpu_rows("master" if self.master else "local", samples, _HOST)

    def _sync_pacer_counts(self) -> None:
        self.accounting.clear_pacer()
        if self.master:
            for (_w, step), st in self.pacer_by_worker.items():
                self.accounting.add_pacer(step, int(st.get("cap_hits", 0)), st.get("dispatch_lag_p99_ms"))
        elif self.pacer is not None:
            for step, pst in self.pacer.stats.items():
                m = pst.as_message()
                self.accounting.add_pacer(step, m["cap_hits"], m["dispatch_lag_p99_ms"])

    # -- shape callbacks -----------------------------------------------------------------------------------
    def _plan_message(self, index: int) -> dict[str, Any] | None:
        p = self.plans_list[index]
        if not p.open_loop:
            return None
        load = self.scenario.load
        return {
            "arrival": getattr(load, "arrival", "poisson"),
            "cv": float(getattr(load, "cv", 1.0)),
            "seed": int(getattr(load, "seed", 0)),
            "rate": float(p.target_rps or 0.0),
            "duration_s": p.duration_s,
            "ramp_s": p.ramp_s,
        }

    def _on_step_start(self, step: Step) -> None:
        plan = self._plan_message(step.index)
        if plan is not None:
            p = self.plans_list[step.index]
            step.offered = offered_in_window(_schedule_for(plan, step.index), p.warmup_s, p.duration_s)
        self.timeline.upsert(step)
        p = self.plans_list[step.index]
        unit = "rps" if p.open_loop else "users"
        print(
            f"[capacity] step {step.index + 1}/{len(self.plans_list)}: {step.kind} {step.level:g} {unit} "
            f"for {p.duration_s:g} s (first {p.warmup_s:g} s warmup)",
            flush=True,
        )
        if self.master:
            workers = sorted(
                i for i in (self.runner.get_worker_index(c.id) for c in self.runner.clients.all if c.state != "missing")
                if i is not None
            )
            shards = {str(w): k for k, w in enumerate(workers)}
            users = self.plans_list[step.index].users
            if plan is not None and users < len(workers):
                # Each worker gets 1/n of the arrivals but Locust gives some of them no user: those
                # arrivals wait forever and the step is (rightly) flagged client_limited.
                log.warning("load.max_concurrency %d < %d workers: raise it to at least one user per worker",
                            users, len(workers))
            self.runner.send_message(
                MSG_STEP, {"started": True, "step": step.to_message(), "plan": plan, "shards": shards, "n": len(workers) or 1}
            )
        else:
            self.step_started(step, plan, 0, 1)
        if self._progress is None:
            self._progress = gevent.spawn(self._progress_loop)

    def _on_window_end(self, step: Step) -> None:
        if self.master:
            self.runner.send_message(MSG_STEP, {"step": step.to_message()})
        elif self.pacer is not None:
            self.pacer.stop()

    def _on_drain_end(self, step: Step) -> None:
        if self.master:
            self.runner.send_message(MSG_STEP, {"step": step.to_message()})
        self.write_steps()

    def _on_finished(self) -> None:
        self.timeline.finished = True
        self.ctx.extra_meta["complete"] = True
        if self.master:
            self.runner.send_message(MSG_STEP, {"finished": True})
        print(f"[capacity] all {len(self.plans_list)} steps done", flush=True)

    def _on_reset(self) -> None:
        # A new test from the web UI: a fresh timeline, and a fresh results folder when the previous
        # test used this one (each UI test is its own rehearsal, analysed on its own).
        # Reset the timeline before rotating: rotating stops/starts telemetry, which yields to the
        # hub, and the shape's first tick of the new test may run meanwhile; its step 0 must land on
        # the fresh timeline, not be wiped by a late clear.
        rotate = bool(self.timeline.steps)
        self.timeline.steps.clear()
        self.timeline.finished = False
        self.accounting = StepAccounting(
            self.timeline, self.scenario.load.max_schedule_lag_p99_ms, self.scenario.load.max_client_cpu_pct
        )
        if rotate:
            self._rotate_results()
        self.ctx.extra_meta["complete"] = False
        if self.master:
            self.runner.send_message(MSG_STEP, {"reset": True})

    def _on_test_stop(self, **_: Any) -> None:
        """Web UI: a test ended (finished or stopped) — write its steps.json and analyse its folder."""
        if not self.timeline.steps:
            return
        self._clip_interrupted()
        self.write_steps()
        folder = Path(self.ctx.results_dir)
        # Let the workers' last record batches land first (they ship every second).
        gevent.spawn_later(2.5, _analyse_in_background, folder)

    def _rotate_results(self) -> None:
        sink = self.ctx.sink
        rotate = getattr(sink, "rotate", None)
        if rotate is None:
            log.warning("this records sink cannot switch folders: consecutive UI tests share %s", self.ctx.results_dir)
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(self.scenario.output) / f"{self.scenario.name}-{stamp}"
        folder, n = base, 1
        while folder.exists():
            n += 1
            folder = base.with_name(f"{base.name}-{n}")
        folder.mkdir(parents=True, exist_ok=True)
        # The plugin re-reads parsed_options at test_start (ctx.results_dir follows); the sink is switched now.
        self.env.parsed_options.results_dir = str(folder)
        rotate(folder)
        self.ctx.results_dir = folder
        if self.telemetry is not None:
            with contextlib.suppress(Exception):
                self.telemetry.stop()
        self._write_scenario_copy()
        self._start_telemetry()
        print(f"[capacity] new test: results → {folder}", flush=True)

    def _progress_loop(self) -> None:
        try:
            self._progress_steps()
        finally:
            self._progress = None

    def _progress_steps(self) -> None:
        while self.shape is not None and not self.shape.finished:
            gevent.sleep(PROGRESS_INTERVAL_S)
            step = self.shape.current
            if step is None or self.shape.finished or self.runner.state not in ("spawning", "running"):
                continue
            n, ttft = self.accounting.progress(step.index)
            ttft_s = f"{ttft:.0f} ms" if ttft is not None else "-"
            print(
                f"[capacity] step {step.index + 1}/{len(self.plans_list)} ({step.level:g} "
                f"{'rps' if step.target_rps is not None else 'users'}, {self.shape.phase}): "
                f"{n} requests, TTFT p95 {ttft_s}",
                flush=True,
            )

    # -- outputs ---------------------------------------------------------------------------------------------
    def write_steps(self) -> None:
        self._collect_local()
        self._sync_pacer_counts()
        try:
            path = Path(self.ctx.results_dir) / "steps.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_steps_json(path, self.accounting.document({"scenario": self.scenario.name}))
        except Exception:
            log.exception("writing steps.json failed")

    def _write_scenario_copy(self) -> None:
        try:
            d = Path(self.ctx.results_dir)
            d.mkdir(parents=True, exist_ok=True)
            (d / "scenario.yaml").write_text(self.scenario.resolved_yaml(redact=True), encoding="utf-8")
        except Exception:
            log.exception("writing the scenario copy failed")

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
            plan = self._plan_message(step.index)
            if plan is not None:  # offered = arrivals scheduled in the window actually measured
                p = self.plans_list[step.index]
                step.offered = offered_in_window(
                    _schedule_for(plan, step.index), p.warmup_s, step.end_unix - step.start_unix
                )

    def _on_quitting(self, **_: Any) -> None:
        self._clip_interrupted()
        self.ctx.extra_meta["complete"] = self.timeline.finished
        self.ctx.extra_meta["steps_run"] = len(self.timeline.steps)
        if not self.timeline.finished:
            self.ctx.extra_meta["incomplete_reason"] = "stopped before the last step finished (interrupted)"
        self.write_steps()
        if self.watcher is not None:
            self.watcher.stop()
        if getattr(self, "telemetry", None) is not None:
            try:
                self.telemetry.stop()
                # Provenance (server version/settings, models, GPU names) and scrape gaps go into
                # meta.json, which the plugin writes after this listener.
                self.ctx.extra_meta["telemetry"] = {
                    "provenance": self.telemetry.provenance(),
                    "gaps": list(self.telemetry.gaps)[-50:],
                }
            except Exception:
                log.exception("stopping telemetry failed")
