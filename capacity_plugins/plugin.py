"""The plugin's one entry point into Locust, in Locust's own plugin shape.

A locustfile calls `install()` once (module level); it adds two listeners:

- `init_command_line_parser`: the LLM options, `--scenario`, the live view's exporter flags. With
  `--scenario FILE` the scenario is loaded and parsed into typed options here, once per process;
  the flags show its values as their defaults (the web UI form), and only what someone typed
  replaces a field of it (client/options.py `overridden`).
- `init`: `register(environment)` builds this process's run in an explicit order —
  options → results folder → events → client (dialect, headers, secrets) and its records sink →
  request source (corpus, shard) → the run's lifecycle and its transport → live view (web UI tab,
  /metrics) → rehearsal (step authority or worker side). Each part is a small object owned by one
  role, attached to the environment where others need it (`capacity_events`, `capacity_client`,
  `capacity_source`, `capacity_live`), and adds its own listeners to Locust's events and the
  suite's (client/events.py).

Per role: the *local* runner and the *master* own the results folder and write every file; the
master sends each test's options to its workers (swarm/handshake.py); a *worker* generates load,
tags records with the master's steps and ships them.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import gevent
import locust
from locust.runners import MasterRunner, WorkerRunner

from capacity_plugins.client.client import LLMClient
from capacity_plugins.client.events import CapacityEvents
from capacity_plugins.client.options import add_arguments, overridden, redact_headers, redacted_options
from capacity_plugins.client.tokens import TokenCountAudit
from capacity_plugins.contracts.dialects import url_path_problem
from capacity_plugins.contracts.meta import Meta, Records, Workers
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.redaction import strip_userinfo
from capacity_plugins.errors import UserError
from capacity_plugins.rehearsal import meta as meta_mod
from capacity_plugins.rehearsal import workloads as workloads_mod
from capacity_plugins.rehearsal.results import ResultsFolder, choose_folder
from capacity_plugins.rehearsal.source import RequestSource
from capacity_plugins.sinks.records import RecordsSink
from capacity_plugins.swarm.clock import MasterClock, WorkerClock
from capacity_plugins.swarm.deadman import DEFAULT_REJOIN_S, DEFAULT_SILENCE_S, DeadMansSwitch
from capacity_plugins.swarm.deadman import add_arguments as deadman_arguments
from capacity_plugins.swarm.handshake import MasterHandshake, WorkerHandshake
from capacity_plugins.swarm.locust_compat import (
    parse_locust_defaults_once,
    stop_csv_writers,
    tolerate_slow_heartbeats,
    track_csv_writer,
    wait_for_workers_before_quit,
)
from capacity_plugins.swarm.membership import SwarmMembership
from capacity_plugins.swarm.shipping import MasterReceiving, WorkerShipping

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.event import Events

    from capacity_plugins.scenario import Scenario

log = logging.getLogger(__name__)

Role = Literal["local", "master", "worker"]

_installed_on: weakref.WeakSet[Events] = weakref.WeakSet()


def install(events: Events | None = None) -> None:
    """Add the plugin's two listeners to `events` (Locust's global events by default); idempotent."""
    events = events or locust.events
    if events in _installed_on:
        return
    _installed_on.add(events)
    events.init_command_line_parser.add_listener(_on_parser)
    events.init.add_listener(_on_init)
    # Locust's CSV writer would run once more after its files closed (swarm/locust_compat.py)
    track_csv_writer()
    events.quit.add_listener(stop_csv_writers)


def _on_parser(parser: Any, **_: Any) -> None:
    from capacity_plugins import webui

    path = _scenario_argument(sys.argv[1:])
    add_arguments(parser, _base_options_or_exit(path))
    parser.add_argument("--scenario", default="", include_in_web_ui=False,
                        help="Capacity rehearsal YAML (scenarios/*.yaml): load shape, arrivals, request settings, SLO")
    webui.add_arguments(parser)
    deadman_arguments(parser)
    if path and not _load_scenario(path).target.embedded:
        parser.set_defaults(host=_load_scenario(path).target.url)


def _scenario_argument(argv: list[str]) -> str:
    """The value of --scenario on this command line (before Locust parses the rest)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--scenario", default="")
    known, _ = p.parse_known_args(argv)
    return str(known.scenario or "")


@functools.cache
def _load_scenario(path: str) -> Scenario:
    from capacity_plugins.scenario import load_scenario

    return load_scenario(path)


@functools.cache
def _base_options(path: str) -> LLMOptions:
    """What this process's options start from: its scenario's, parsed once, or the plain defaults."""
    return _load_scenario(path).options() if path else LLMOptions()


def _base_options_or_exit(path: str) -> LLMOptions:
    try:
        return _base_options(path)
    except UserError as e:
        _exit_bad_input(e)


def _exit_bad_input(e: UserError) -> NoReturn:
    # one clear line and exit 2 (bad input), never a traceback
    sys.stderr.write(f"capacity: {e}\n")
    sys.stderr.flush()
    sys.exit(2)


def _on_init(environment: Environment, **_: Any) -> None:
    # A Ctrl-C must stop the test in the main greenlet, never kill a user mid-request (a lost
    # record). Here, not in register(): only a real Locust process fires init through us.
    from capacity_plugins.swarm.signals import route_to_main_greenlet
    from capacity_plugins.swarm.supervisor import watch_supervisor

    route_to_main_greenlet()
    watch_supervisor()  # started by `capacity run`: stop when it is gone
    try:
        register(environment)
    except UserError as e:
        _exit_bad_input(e)
    # Locust creates gevent's hub when it is imported and arms `--run-time` with a timer right after
    # init, before the loop has ever run: the loop's clock still reads the import time, so a start
    # (imports, the corpus) longer than -t fired the timer at once and the run sent nothing.
    gevent.get_hub().loop.update_now()


def _role(runner: Any) -> Role:
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return "worker"
    return "local"


def register(environment: Environment) -> None:
    """Build this process's run on `environment` and attach its parts and listeners. Raises UserError.

    What it attaches, each part owned by one role (docs/architecture.md):
    `environment.capacity_events` (the suite's own events, client/events.py),
    `environment.capacity_client` (how to make a request and where its record goes, client/client.py),
    `environment.capacity_source` (what to send next and when, rehearsal/source.py) and, on the
    writing process, `environment.capacity_live` (the live view, webui/)."""
    runner = environment.runner
    role = _role(runner)
    parsed = environment.parsed_options
    path = str(getattr(parsed, "scenario", "") or "")
    scenario = _load_scenario(path) if path else None
    base = _base_options(path)
    options = overridden(base, parsed)
    if role != "worker" and environment.host:
        # The dialect appends its own path: --host http://h:8000/v1 would load /v1/v1/chat/completions.
        found = url_path_problem(environment.host, options.dialect)
        if found is not None:
            raise UserError(f"--host: {found}")

    # 1. the results folder (writing processes only), the events, the client and its records sink
    folder = choose_folder(options.results_dir, scenario) if role != "worker" else Path(".")
    if role != "worker" and parsed is not None:
        parsed.results_dir = str(folder)
    events = CapacityEvents()
    events.attach(environment)
    target_url = environment.host  # with user:password, if given: the client turns them into a header
    sink = None
    if runner is not None:  # written here (local, master) or shipped to the master (worker)
        sink = RecordsSink(folder, role, options.secrets(target_url),
                           emit=lambda record: events.record.fire(record=record))
    client = LLMClient(options, target_url=target_url, records=sink)
    if environment.host and environment.host != strip_userinfo(environment.host):
        # user:password in the URL becomes a Basic header (the client's); everything that shows
        # the host — Locust's report and web UI, meta.json, the workers — sees it without them
        environment.host = strip_userinfo(environment.host)
        if parsed is not None:
            parsed.host = environment.host
    source = RequestSource(client, worker_index=int(getattr(runner, "worker_index", 0) or 0)
                           if role == "worker" else 0)
    if role != "worker" or scenario is not None:
        # A worker with its own scenario loads the corpus now; the master's setup only checks it.
        source.load(options)
        source.prepare_classes(scenario, options)  # the classes' corpora too: a bad one is exit 2
        source.prepare_sessions(scenario)  # an agentic load's session scripts
    client.attach(environment)
    source.attach(environment)  # last: a user waiting for the plugin starts once it is there
    results = ResultsFolder(folder, scenario, client, events, parsed)
    # the records' transport: shipped to the master (worker), received from the workers (master)
    shipping = membership = None
    if sink is not None and role == "worker":
        shipping = WorkerShipping(runner, sink, lambda: source.worker_index)
    elif sink is not None and role == "master":
        membership = SwarmMembership(runner, events)
    run = _Run(environment, client, source, results, scenario, base, role, shipping=shipping,
               membership=membership)
    if sink is not None:
        sink.open()
        if shipping is not None:
            parse_locust_defaults_once()  # not a parser per option of each spawn message (swarm/locust_compat.py)
            shipping.start()
            # no word from the master for a bounded time: this worker's load stops (swarm/deadman.py)
            DeadMansSwitch(environment, client, shipping, lambda: source.worker_index,
                           silence_s=float(getattr(parsed, "master_silence_s", None) or DEFAULT_SILENCE_S),
                           rejoin_s=float(getattr(parsed, "master_rejoin_s", None) or DEFAULT_REJOIN_S)).attach()
        if membership is not None:
            tolerate_slow_heartbeats()
            membership.start()
            environment.events.test_start.add_listener(membership.test_started)
            environment.events.test_stopping.add_listener(membership.test_stopping)
            receiving = MasterReceiving(runner, sink)
            receiving.attach()
            wait_for_workers_before_quit(runner, lambda: run.ran, receiving.wait_for_finals)

    # Locust fires `quitting` in reverse order of registration: attaching the run's lifecycle
    # before the live view and the rehearsal makes its meta.json the last thing written, after
    # they have added what they know (completeness, telemetry provenance).
    run.attach()

    # 2. the live view (web UI tab, /llm/stats, /metrics) on the writing process
    if runner is not None and role != "worker":
        from capacity_plugins import webui

        try:
            webui.register(environment, client, results, role, run.membership, scenario)
        except OSError as e:
            opts = environment.parsed_options
            where = f"{getattr(opts, 'exporter_port', '')} on {getattr(opts, 'exporter_host', '')}"
            raise UserError(f"--exporter-port {where}: {e.strerror or e}") from None

    # 3. the rehearsal: steps from the scenario (authority) or from the master (worker)
    if runner is not None:
        _attach_rehearsal(environment, run)


def _attach_rehearsal(environment: Environment, run: _Run) -> None:
    from capacity_plugins.rehearsal.generator import GeneratorSide, WorkerSide

    scenario = run.scenario
    if run.role == "worker":
        WorkerSide(environment, run.source, run.client).attach()
        return
    if scenario is None:
        return  # a plain -u/-r/-t run: no steps
    if scenario.target.embedded and not environment.host:
        raise UserError("target.url is embedded; start it with `capacity run`, or pass --host URL")
    opts = environment.parsed_options
    ignored = [f for f, d in (("-u", "num_users"), ("-r", "spawn_rate"), ("-t", "run_time")) if getattr(opts, d, None)]
    if ignored:
        log.warning("%s: ignored with --scenario (the scenario's load section decides users and duration)",
                    ", ".join(ignored))
    from capacity_plugins.rehearsal.authority import StepAuthority

    generator = None
    if run.role == "local":
        generator = GeneratorSide(environment, run.source, run.client, "local")
        generator.attach()
        if scenario.open_loop:
            run.source.ensure_pacer()  # the pool spawns before the first step and waits for arrivals
    ready = run.handshake.all_ready if run.handshake is not None else (lambda: True)
    StepAuthority(environment, scenario, run.results, run.source, generator, ready, run.membership).attach()
    # Locust installs its SIGTERM handler only after a headless shape run has ended
    # (main.start_automatic_run blocks in shape_greenlet.join() first), so a SIGTERM during the
    # rehearsal (Kubernetes, CI timeouts, `capacity run`) would kill the process without a stop:
    # no cancelled records, no meta.json. With the web UI, Locust's own SIGTERM handler is there.
    # A SIGTERM while the process shuts down is ignored (swarm/signals.py): one clean stop, not two.
    from capacity_plugins.swarm.signals import route_to_main_greenlet, shutting_down

    route_to_main_greenlet(sigterm=bool(getattr(opts, "headless", False)))
    environment.events.quitting.add_listener(shutting_down)


class _Run:
    """This process's test lifecycle: start/stop times, the server probe, meta.json, clean close."""

    def __init__(self, environment: Environment, client: LLMClient, source: RequestSource, results: ResultsFolder,
                 scenario: Scenario | None, base: LLMOptions, role: Role, *,
                 shipping: WorkerShipping | None = None, membership: SwarmMembership | None = None) -> None:
        self.env = environment
        self.client = client
        self.source = source
        self.results = results
        self.scenario = scenario
        self.base = base  # what the web UI form's values replace fields of, at each test start
        self.role = role
        self.events: CapacityEvents = environment.capacity_events  # type: ignore[attr-defined]
        self.runner: Any = environment.runner
        self.start_unix: float | None = None
        self.end_unix: float | None = None
        self.server: dict[str, Any] = {}
        self.ran = False
        self.finished = False
        self.shipping = shipping  # a worker's records on their way to the master
        self.membership = membership  # the master's view of its workers
        self.handshake: MasterHandshake | None = None  # the master's, made in attach()
        # chunk vs tokenizer counts over every record written here (servers without usage)
        self.token_audit = TokenCountAudit()

    def attach(self) -> None:
        ev = self.env.events
        ev.test_start.add_listener(self.on_test_start)
        ev.test_stop.add_listener(self.on_test_stop)
        ev.quitting.add_listener(self.on_quitting)
        ev.reset_stats.add_listener(lambda **_: self.client.stats.reset())
        role = self.role
        if role == "worker":
            ev.report_to_master.add_listener(self.on_report_to_master)
            WorkerClock(self.runner, lambda: self.source.worker_index, shipping=self.shipping).attach()
            WorkerHandshake(self.env, self.client, self.source).attach()
        elif role == "master":
            ev.worker_report.add_listener(self.on_worker_report)
            open_loop = bool(self.scenario is not None and self.scenario.open_loop)
            self.handshake = MasterHandshake(self.env, self.client, self.source, open_loop)
            self.handshake.clock = MasterClock(self.runner)
            self.handshake.clock.attach()
            self.handshake.attach()
        if role != "worker":
            self.events.record.add_listener(lambda record, **_: self.token_audit.add(record))
        if role != "worker" and self.env.host:
            gevent.spawn(self._probe)

    def _probe(self) -> None:
        try:
            self.server = meta_mod.probe_server(self.env.host or "", self.client.request_headers({}))
        except Exception:  # best effort only
            log.debug("server probe failed", exc_info=True)

    def on_test_start(self, **_: Any) -> None:
        client, source = self.client, self.source
        if self.end_unix is not None:
            # Another test from the web UI after one that ended: its own clock and live numbers.
            self.start_unix = self.end_unix = None
            if self.role != "worker":
                client.stats.reset()
        self.ran = True
        if self.start_unix is None:
            self.start_unix = time.time()
        if self.role == "worker":
            return
        # the web UI form may have changed options since init
        try:
            options = overridden(self.base, self.env.parsed_options)
            source.load(options)
            client.configure(options)
            source.prepare_classes(self.scenario, options)
            source.prepare_sessions(self.scenario)
        except UserError as e:
            log.error("capacity: %s (keeping the previous options)", e)
        assert source.corpus is not None
        if self.role == "local":
            source.worker_count = 1
            source.take_shard(client.options, source.workload_specs)
            return
        if client.records is not None:
            client.records.final_from.clear()
        assert self.handshake is not None
        self.handshake.send_setup()

    def on_test_stop(self, **_: Any) -> None:
        self.end_unix = time.time()
        if self.role == "worker":
            if self.shipping is not None:
                self.shipping.ship(final=True)
        elif not getattr(self.env.parsed_options, "headless", True):
            # Web UI: each test is analysed when it stops, so its folder must be whole now, not
            # only at quitting (quitting rewrites both for the last test).
            self.write_outputs()

    def on_quitting(self, **_: Any) -> None:
        if self.finished:
            return
        self.finished = True
        if self.shipping is not None:
            self.shipping.stop()
        if self.client.records is not None:
            self.client.records.close()
        if self.membership is not None:
            try:
                self.membership.check()  # the last word on who was lost, before meta.json says it
            except Exception:
                log.debug("last worker check failed", exc_info=True)
            self.membership.stop()
        if self.handshake is not None and self.handshake.clock is not None:
            self.handshake.clock.stop()
        if self.role == "worker":
            return
        if self.end_unix is None:
            self.end_unix = time.time()
        meta = self.write_outputs()
        if meta.workers_lost and self.env.process_exit_code is None:
            self.env.process_exit_code = 1  # a worker was lost: the run is incomplete (docs/exit-codes.md)

    def on_report_to_master(self, data: dict[str, Any] | None = None, **_: Any) -> None:
        if data is not None:
            data["llm_stats"] = self.client.stats.take_delta()

    def on_worker_report(self, data: dict[str, Any] | None = None, **_: Any) -> None:
        if data and data.get("llm_stats"):
            try:
                self.client.stats.merge_delta(data["llm_stats"])
            except ValueError as e:
                log.error("capacity: %s", e)

    def write_outputs(self) -> Meta:
        self.results.write_llm_stats()
        meta = self.meta()
        self.results.write_meta(meta)
        return meta

    def meta(self) -> Meta:
        options, source = self.client.options, self.source
        corpus = source.corpus
        handshake = self.handshake
        seen = sorted(handshake.workers_seen) if handshake is not None else []
        records = self.client.records
        meta = Meta(
            tool="capacity-plugins",
            versions=meta_mod.versions(),
            options=redacted_options(self.env.parsed_options, options),
            extra_headers=redact_headers(options.headers),
            dialect=options.dialect,
            model=options.model,
            target=self.env.host,
            # the embedded simulator: every server and GPU reading of this run is simulated
            simulated=bool(self.scenario is not None and self.scenario.target.embedded),
            server=self.server,
            corpus={
                "source": options.corpus,
                "sha256": corpus.sha256 if corpus is not None else None,
                "samples": len(corpus.samples) if corpus is not None else 0,
            },
            seed=options.seed,
            sampling=options.sampling,
            start_unix=self.start_unix,
            end_unix=self.end_unix,
            role=self.role,
            workers=Workers(count=source.worker_count, indices=seen or [0]),
            records=Records.model_validate(records.accounting()) if records is not None else None,
            refusals=handshake.refusals if handshake is not None else [],
            token_counting=self.token_audit.summary(),
        )
        if source.workload_specs:
            meta.workloads = workloads_mod.provenance(source.workload_specs, options)
        self.events.writing_meta.fire(meta=meta)  # the rehearsal's completeness, search, telemetry, ...
        if self.membership is not None:
            self._account_lost_workers(meta, self._lost_workers(meta))
            if self.membership.rejoined:
                meta.workers_rejoined = self.membership.rejoined_list()
        if handshake is not None and handshake.clock is not None:
            meta.clock = handshake.clock.meta(seen)
        return meta

    def _lost_workers(self, meta: Meta) -> list[dict[str, Any]]:
        """Workers Locust saw go, and workers that ran but never sent their final record batch
        (killed before Locust noticed the missing heartbeats)."""
        assert self.membership is not None
        lost = self.membership.lost_list()
        known = {w["worker"] for w in lost}
        by_worker = meta.records.by_worker if meta.records is not None else {}
        for w, entry in sorted(by_worker.items()):
            if self.finished and not entry.final_batch and int(w) not in known:
                lost.append({"worker": int(w), "client_id": None, "lost_unix": None,
                             "reason": "stopped without its final record batch"})
        return lost

    @staticmethod
    def _account_lost_workers(meta: Meta, lost: list[dict[str, Any]]) -> None:
        """A lost worker makes the run incomplete; records it made after its last batch are unknown."""
        meta.workers_lost = lost
        if not lost:
            return
        names = ", ".join(str(w["worker"]) for w in lost)
        meta.complete = False
        meta.incomplete_reason = "; ".join(
            r for r in (meta.incomplete_reason, f"worker(s) {names} lost during the run") if r
        )
        records = meta.records
        if records is None:
            return
        for w in lost:
            entry = records.by_worker.get(str(w["worker"]))
            if entry is not None and not entry.final_batch:
                # what it produced after its last report never reached us: unknown, not zero
                entry.lost = None
                records.lost = None
                records.lost_reason = (f"worker(s) {names} stopped without a final batch: records made "
                                       "after their last report (about a second, plus requests in flight) are lost")


__all__ = ["install", "register"]
