"""Wires the LLM measurement core into Locust: options, run context, records, stats, meta.json.

A locustfile calls `install()` once (module level). Everything else happens in one `init`
listener, `register(environment)`, per process:

- local: loads the corpus, writes requests.jsonl / llm_stats.csv / meta.json itself.
- master: loads the corpus (its sha256 is the reference), sends the options + hash + shard count
  to the workers at test start, writes the consolidated records, merges LLM stats, waits for the
  workers' final record batches before quitting.
- worker: on the master's setup message, applies the master's options, loads its own copy of the
  corpus, refuses to run if the hash differs, takes shard `worker_index` of `shard_count`, ships
  records (≥ every second) and LLM stats deltas (report_to_master).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import locust
from locust.runners import MasterRunner, WorkerRunner

from capacity_plugins import meta as meta_mod
from capacity_plugins.context import RunContext
from capacity_plugins.errors import UserError
from capacity_plugins.options import LLMOptions, add_arguments, redact_headers, redacted_options
from capacity_plugins.sinks.records import RecordsSink

log = logging.getLogger(__name__)

MSG_SETUP = "capacity_setup"
MSG_REFUSE = "capacity_refuse"

_installed_on: set[int] = set()


def install(events: Any = None) -> None:
    """Register the option and init listeners (idempotent per Events object)."""
    events = events or locust.events
    if id(events) in _installed_on:
        return
    _installed_on.add(id(events))
    events.init_command_line_parser.add_listener(_on_parser)
    events.init.add_listener(_on_init)
    # The live view (web UI tab, /llm/stats, /metrics exporter) reads the context built above.
    from capacity_plugins import webui

    webui.install(events)


def _on_parser(parser: Any, **_: Any) -> None:
    add_arguments(parser)


def _on_init(environment: Any, **_: Any) -> None:
    # A Ctrl-C must stop the test in the main greenlet, never kill a user mid-request (a lost
    # record). Here, not in register(): only a real Locust process fires init through us.
    from capacity_plugins.signals import route_to_main_greenlet

    route_to_main_greenlet()
    try:
        register(environment)
    except UserError as e:
        # one clear line and exit 2 (bad input), never a traceback
        sys.stderr.write(f"capacity: {e}\n")
        sys.stderr.flush()
        sys.exit(2)


def _load_corpus(options: LLMOptions) -> Any:
    from capacity_plugins.corpus import load_corpus

    return load_corpus(options.corpus, min_distinct=options.min_distinct)


def _role(runner: Any) -> str:
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return "worker"
    return "local"


class _Plugin:
    """Per-environment state and listeners (kept on the context as `ctx._plugin`)."""

    def __init__(self, environment: Any, ctx: RunContext) -> None:
        self.env = environment
        self.ctx = ctx
        self.runner = environment.runner
        self.start_unix: float | None = None
        self.end_unix: float | None = None
        self.server: dict[str, Any] = {}
        self.ran = False
        self.refusals: list[str] = []
        self.workers_seen: set[int] = set()
        self.finished = False

    # -- shared -------------------------------------------------------------------------------

    def attach(self) -> None:
        ev = self.env.events
        role = self.ctx.role
        ev.test_start.add_listener(self.on_test_start)
        ev.test_stop.add_listener(self.on_test_stop)
        ev.quitting.add_listener(self.on_quitting)
        ev.reset_stats.add_listener(self.on_reset_stats)
        if role == "worker":
            ev.report_to_master.add_listener(self.on_report_to_master)
            self.runner.register_message(MSG_SETUP, self.on_setup)
        elif role == "master":
            ev.worker_report.add_listener(self.on_worker_report)
            self.runner.register_message(MSG_REFUSE, self.on_refuse)
        if role != "worker" and self.env.host:
            gevent.spawn(self._probe)

    def _probe(self) -> None:
        try:
            self.server = meta_mod.probe_server(self.env.host, self.ctx.request_headers({}))
        except Exception:  # best effort only
            log.debug("server probe failed", exc_info=True)

    def on_reset_stats(self, **_: Any) -> None:
        self.ctx.llm_stats.reset()

    def on_test_start(self, environment: Any = None, **_: Any) -> None:
        ctx = self.ctx
        if self.end_unix is not None:
            # Another test from the web UI after one that ended: its own clock and live numbers.
            self.start_unix = self.end_unix = None
            if ctx.role != "worker":
                ctx.llm_stats.reset()
        self.ran = True
        if self.start_unix is None:
            self.start_unix = time.time()
        if ctx.role == "worker":
            return
        # the web UI form may have changed options since init
        try:
            options = LLMOptions.from_parsed(self.env.parsed_options)
            if options.corpus != ctx.options.corpus or options.min_distinct != ctx.options.min_distinct:
                ctx.corpus = _load_corpus(options)
            ctx.reconfigure(options)
        except UserError as e:
            log.error("capacity: %s (keeping the previous options)", e)
        if ctx.role == "local":
            ctx.sampler = ctx.corpus.sampler(ctx.options.sampling, ctx.options.seed, 0, 1)
            ctx.worker_count = 1
            return
        # master: tell every worker which options, corpus hash and shard count to use
        runner = self.runner
        indices = [runner.get_worker_index(c.id) for c in runner.clients.all]
        shard_count = max([runner.worker_count, *[i + 1 for i in indices]])
        ctx.worker_count = shard_count
        self.workers_seen.update(indices)
        if ctx.sink is not None:
            ctx.sink.final_from.clear()
        runner.send_message(
            MSG_SETUP,
            {
                "options": _msgpack_safe(vars(self.env.parsed_options)),
                "sha256": ctx.corpus.sha256,
                "shard_count": shard_count,
            },
        )

    def on_test_stop(self, environment: Any = None, **_: Any) -> None:
        self.end_unix = time.time()
        if self.ctx.role == "worker" and self.ctx.sink is not None:
            self.ctx.sink.ship(final=True)
        elif not getattr(self.env.parsed_options, "headless", True):
            # Web UI: each test is analysed when it stops, so its folder must be whole now, not
            # only at quitting (quitting rewrites both for the last test).
            self.write_outputs()

    def write_outputs(self) -> None:
        ctx = self.ctx
        try:
            ctx.results_dir.mkdir(parents=True, exist_ok=True)
            ctx.llm_stats.write_csv(ctx.results_dir / "llm_stats.csv")
        except Exception:
            log.exception("writing llm_stats.csv failed")
        self.write_meta()

    def on_quitting(self, environment: Any = None, **_: Any) -> None:
        if self.finished:
            return
        self.finished = True
        ctx = self.ctx
        if ctx.sink is not None:
            ctx.sink.close()
        if ctx.role == "worker":
            return
        if self.end_unix is None:
            self.end_unix = time.time()
        self.write_outputs()

    # -- worker -------------------------------------------------------------------------------

    def on_report_to_master(self, client_id: Any = None, data: dict[str, Any] | None = None, **_: Any) -> None:
        if data is not None:
            data["llm_stats"] = self.ctx.llm_stats.take_delta()

    def on_setup(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        ctx = self.ctx
        data = msg.data
        try:
            options = LLMOptions.from_parsed(SimpleNamespace(**data["options"]))
            ctx.reconfigure(options)
            if ctx.corpus is None or getattr(ctx, "_corpus_source", None) != options.corpus:
                ctx.corpus = _load_corpus(options)
                ctx._corpus_source = options.corpus  # type: ignore[attr-defined]
        except UserError as e:
            self._refuse(f"worker {ctx.worker_index}: {e}")
            return
        if ctx.corpus.sha256 != data["sha256"]:
            self._refuse(
                f"worker {ctx.worker_index}: corpus {options.corpus!r} has sha256 {ctx.corpus.sha256[:12]}… "
                f"but the master's has {str(data['sha256'])[:12]}…; copy the master's corpus file to this host"
            )
            return
        ctx.worker_count = int(data["shard_count"])
        ctx.sampler = ctx.corpus.sampler(options.sampling, options.seed, ctx.worker_index, ctx.worker_count)

    def _refuse(self, reason: str) -> None:
        log.error("capacity: refusing to run: %s", reason)
        self.ctx.sampler = None
        self.runner.send_message(MSG_REFUSE, {"reason": reason})

    # -- master -------------------------------------------------------------------------------

    def on_worker_report(self, client_id: Any = None, data: dict[str, Any] | None = None, **_: Any) -> None:
        if data and data.get("llm_stats"):
            try:
                self.ctx.llm_stats.merge_delta(data["llm_stats"])
            except ValueError as e:
                log.error("capacity: %s", e)

    def on_refuse(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        reason = str(msg.data.get("reason"))
        self.refusals.append(reason)
        sys.stderr.write(f"capacity: a worker refused to run: {reason}\n")
        self.env.process_exit_code = 2
        gevent.spawn(self.runner.quit)

    # -- meta.json ----------------------------------------------------------------------------

    def write_meta(self) -> None:
        ctx = self.ctx
        corpus = ctx.corpus
        meta: dict[str, Any] = {
            "tool": "capacity-plugins",
            "versions": meta_mod.versions(),
            "options": redacted_options(self.env.parsed_options),
            "extra_headers": redact_headers(ctx.options.headers),
            "dialect": ctx.options.dialect,
            "model": ctx.options.model,
            "target": self.env.host,
            "server": self.server,
            "corpus": {
                "source": ctx.options.corpus,
                "sha256": getattr(corpus, "sha256", None),
                "samples": len(getattr(corpus, "samples", []) or []),
            },
            "seed": ctx.options.seed,
            "sampling": ctx.options.sampling,
            "start_unix": self.start_unix,
            "end_unix": self.end_unix,
            "role": ctx.role,
            "workers": {"count": ctx.worker_count, "indices": sorted(self.workers_seen) or [0]},
            "records": ctx.sink.accounting() if ctx.sink is not None else None,
            "refusals": self.refusals,
        }
        meta.update(ctx.extra_meta)
        try:
            meta_mod.write_meta(ctx.results_dir / "meta.json", meta)
        except Exception:
            log.exception("writing meta.json failed")


def _msgpack_safe(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, (str, int, float, bool, type(None))):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [x if isinstance(x, (str, int, float, bool, type(None))) else str(x) for x in v]
    return out


def _own_results_dir(parsed: Any) -> None:
    """Each run writes its own folder: records of two runs must never mix in one requests.jsonl.

    Without --results-dir (or a scenario's output), a fresh results/run-<timestamp>/ is used; an
    explicit folder that already holds records is refused (exit 2) rather than appended to.
    """
    if parsed is None:
        return
    given = getattr(parsed, "results_dir", None)
    if given in (None, "", "results"):
        base = Path("results") / time.strftime("run-%Y%m%d-%H%M%S")
        folder, n = base, 1
        while folder.exists():
            n += 1
            folder = base.with_name(f"{base.name}-{n}")
        parsed.results_dir = str(folder)
        return
    records = Path(given) / "requests.jsonl"
    if records.exists() and records.stat().st_size > 0:
        raise UserError(
            f"--results-dir {given}: already holds requests.jsonl from another run; give a new folder "
            "(two runs' records must not mix)"
        )


def register(environment: Any) -> RunContext:
    """Build the RunContext for this process and attach every listener. Raises UserError."""
    runner = environment.runner
    role = _role(runner)
    if role != "worker":
        _own_results_dir(environment.parsed_options)
    options = LLMOptions.from_parsed(environment.parsed_options)
    ctx = RunContext.from_options(options, role=role)
    if role == "worker":
        ctx.worker_index = int(getattr(runner, "worker_index", 0) or 0)
    else:
        ctx.corpus = _load_corpus(options)
    environment.capacity = ctx
    plugin = _Plugin(environment, ctx)
    ctx._plugin = plugin  # type: ignore[attr-defined]
    if runner is not None:
        sink = RecordsSink(ctx, runner, role)
        ctx.sink = sink
        sink.open()
        if role == "master":
            from capacity_plugins.sinks.records import install_master_quit_wait

            install_master_quit_wait(runner, sink, lambda: plugin.ran)
    plugin.attach()
    return ctx


__all__ = ["install", "register"]
