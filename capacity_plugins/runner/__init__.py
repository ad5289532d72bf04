"""`capacity run SCENARIO.yaml`: preflight, (embedded simulator), Locust, analysis — one command.

    capacity run scenarios/quickstart.yaml
    capacity run s.yaml --processes 4                      # 4 local worker processes
    capacity run s.yaml --master --expect-workers 2        # distributed: this host is the master
    capacity run s.yaml --worker --master-host 10.0.0.5    # … and this is one of the workers
    capacity run s.yaml --web                              # Locust web UI, pre-filled from the scenario

Locust runs as a child process with the package's locustfile and `--scenario` (the rehearsal
wiring inside it does the shape, arrivals and steps.json); this process owns what surrounds it:
the results folder, the embedded simulator, the preflight, Ctrl-C, the analysis and exit codes
(docs/exit-codes.md: 0 done — failed requests are data; 1 the run could not be done; 2 bad
input; 3 an opt-in gate failed). It never imports the load side (Locust, gevent): a test checks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from capacity_plugins.contracts.folders import new_results_folder
from capacity_plugins.contracts.meta import META_FILE, Meta
from capacity_plugins.contracts.redaction import strip_userinfo
from capacity_plugins.contracts.summary import AnySummary
from capacity_plugins.errors import (
    EXIT_BAD_INPUT,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    CommandParser,
    RunError,
    UserError,
)
from capacity_plugins.runner.child import run_child
from capacity_plugins.runner.command import LOCUSTFILE, locust_command
from capacity_plugins.runner.inputs import check_corpus, scenario_secrets, writable_parent
from capacity_plugins.runner.preflight import preflight
from capacity_plugins.scenario import Scenario, load_scenario
from capacity_plugins.scenario.model import parse_labels

__all__ = ["LOCUSTFILE", "build_parser", "locust_command", "main", "preflight", "results_folder"]

def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity run", description="Run a capacity rehearsal described by a scenario file.")
    p.add_argument("scenario", help="scenario YAML (see scenarios/*.yaml)")
    p.add_argument("--output", help="parent folder for the results (default: the scenario's `output`)")
    p.add_argument("--target-url", metavar="URL",
                   help="load this server instead of the scenario's target.url (`capacity matrix` passes each entry's)")
    p.add_argument("--web", action="store_true", help="open the Locust web UI instead of running headless")
    p.add_argument("--web-port", type=int, default=8089, help="web UI port (with --web)")
    p.add_argument("--processes", type=int, help="number of local Locust worker processes")
    p.add_argument("--master", action="store_true", help="run as the master of a distributed swarm")
    p.add_argument("--expect-workers", type=int, default=1, help="workers the master waits for (with --master)")
    p.add_argument("--master-bind-port", type=int, default=5557, help="port the master listens on (with --master)")
    p.add_argument("--worker", action="store_true", help="run as a worker of a distributed swarm")
    p.add_argument("--master-host", default="127.0.0.1", help="master address (with --worker)")
    p.add_argument("--master-port", type=int, default=5557, help="master port (with --worker)")
    p.add_argument("--exporter-port", type=int, help="serve live swarm metrics for Prometheus on this port")
    p.add_argument("--bind", default="127.0.0.1", metavar="HOST",
                   help="address the master (--master), the web UI (--web) and the exporter listen on; "
                        "everything is loopback unless set (e.g. 0.0.0.0 for workers on other hosts)")
    p.add_argument("--fail-on-slo", action="store_true",
                   help="exit 3 when the SLO gate fails (same rule as `capacity analyze --fail-on-slo`)")
    p.add_argument("--fail-on-verdict", choices=("scale", "observe", "dont_scale_yet"),
                   help="exit 3 when the verdict is this one")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="run the whole load N times, one folder each, and report the run-to-run spread "
                        "(default: the scenario's `repeat`, 1)")
    p.add_argument("--no-analyze", action="store_true", help="skip the analysis at the end")
    p.add_argument("--skip-preflight", action="store_true", help="do not check the target before the run")
    p.add_argument("--label", action="append", metavar="KEY=VALUE",
                   help="a label of the run (build id, git sha, config), over the scenario's `labels:`; repeatable")
    p.add_argument("--history", metavar="PATH|URL",
                   help="record the analysed run in this catalog: a SQLite file, a postgresql:// URL or `off` "
                        "(default: $CAPACITY_HISTORY, else history.sqlite beside the results folder; "
                        "docs/history.md)")
    return p


def _port(flag: str, value: int | None, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if value is not None and not low <= value <= 65535:
        raise UserError(f"{flag}: must be a port between {low} and 65535, got {value}")


def _parse(argv: list[str]) -> argparse.Namespace:
    """The flags, checked before anything happens (no folder, no simulator, no preflight): exit 2."""
    args = build_parser().parse_args(argv)
    if args.master and args.worker:
        raise UserError("--master and --worker exclude each other")
    if args.processes is not None and (args.processes == 0 or args.processes < -1):
        raise UserError("--processes: must be a positive number (or -1 for one per CPU)")
    if args.processes is not None and (args.master or args.worker):
        raise UserError("--processes runs its own master and workers: drop --master / --worker")
    if args.web and args.worker:
        raise UserError("--web has no meaning on a worker")
    if args.master and args.expect_workers < 1:
        raise UserError(f"--expect-workers: a master needs at least 1 worker, got {args.expect_workers}")
    if args.repeat is not None and args.repeat < 1:
        raise UserError(f"--repeat: must be at least 1, got {args.repeat}")
    if args.target_url is not None and args.worker:
        raise UserError("--target-url has no meaning on a worker (the master's target is loaded)")
    if args.web and args.repeat not in (None, 1):
        raise UserError("--repeat has no meaning with --web (each test started in the UI is its own run)")
    args.labels = parse_labels(args.label)
    for flag, value in (("--web-port", args.web_port), ("--master-bind-port", args.master_bind_port),
                        ("--master-port", args.master_port), ("--exporter-port", args.exporter_port)):
        _port(flag, value)
    return args


# -- the run ------------------------------------------------------------------------------------------------


def with_target_url(s: Scenario, url: str) -> Scenario:
    """The scenario with `--target-url` as its target.url, checked by the scenario's own URL rule
    (preflight, secrets and the Locust child's --host then all use it). UserError (exit 2)."""
    if s.target.embedded:
        raise UserError(f"--target-url: {s.source_path or 'the scenario'}: target.url is embedded (capacity run "
                        "starts its own simulator); give the scenario a server URL to replace")
    if url == "embedded":
        raise UserError("--target-url: not an http(s)://host[:port] URL (`url: embedded` belongs in the scenario)")
    try:
        target = type(s.target).model_validate({**s.target.model_dump(), "url": url})
    except ValidationError as e:
        raise UserError(f"--target-url: {e.errors()[0]['msg'].removeprefix('Value error, ').removeprefix('url: ')}") from None
    return s.model_copy(update={"target": target})


def results_folder(s: Scenario, output: str | None) -> Path:
    return new_results_folder(output or s.output, s.name)


def _mark_incomplete(folder: Path, reason: str, unless_finished: bool = False) -> None:
    """meta.json says the run is incomplete, even when Locust died before writing it.

    `unless_finished`: leave a test the Locust child recorded as finished (`complete: true`, written
    only once its last step ended) as it is — a signal after the end interrupted nothing."""
    path = folder / META_FILE
    try:
        meta = Meta.load(path) if path.exists() else Meta()
    except UserError:  # unreadable: what it said is lost either way, the run's incompleteness is not
        meta = Meta()
    if unless_finished and meta.complete is True:
        return
    meta.complete = False
    if "incomplete_reason" not in meta.model_fields_set:
        meta.incomplete_reason = reason
    meta.write(path)


@dataclass
class _Outcome:
    folder: Path
    rc: int
    stopped_by: int | None  # the signal that interrupted the run (Ctrl-C, SIGTERM), or None


def _run_once(args: argparse.Namespace, scenario: Scenario, folder: Path, env: dict[str, str]) -> _Outcome:
    """One run of the whole load into `folder`: embedded simulator, preflight, the Locust child."""
    sim = None
    try:
        if scenario.target.embedded:
            from capacity_plugins.simulator.config import SimConfig
            from capacity_plugins.simulator.launch import SimulatorProcess

            cfg = SimConfig.from_mapping(scenario.target.simulator or {}, where="target.simulator")
            folder.mkdir(parents=True, exist_ok=True)
            sim = SimulatorProcess(cfg, truth_log=folder / "simulator_truth.jsonl")
            url = sim.url
            print(f"[capacity] embedded simulator at {url}", flush=True)
            if args.master:
                print("[capacity] note: the embedded simulator listens on loopback; workers must run on this host",
                      flush=True)
        else:
            url = scenario.target.url
        model = scenario.target.model
        if not args.skip_preflight:
            model = preflight(scenario, url, scenario_secrets(scenario))
            print(f"[capacity] preflight ok: {strip_userinfo(url)} serves {model or 'its model'}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"[capacity] results → {folder}", flush=True)
        if args.web:
            print(f"[capacity] web UI at http://{args.bind}:{args.web_port} — the scenario drives the load: "
                  "press Start (the user count field is not used); Ctrl-C here ends the session", flush=True)
        rc, stopped_by = run_child(locust_command(scenario, args, url, model, folder), env)
    finally:
        if sim is not None:
            sim.stop()
    if rc == 2 and stopped_by is None:
        raise UserError("Locust rejected the options (see the message above)")
    if stopped_by is not None:
        # A test that finished is final: with --web, Ctrl-C is how the session ends, after it.
        _mark_incomplete(folder, "interrupted (Ctrl-C / SIGTERM)", unless_finished=True)
    elif rc != 0:
        _mark_incomplete(folder, f"locust exited with code {rc}")
    return _Outcome(folder, rc, stopped_by)


def _write_labels(folder: Path, labels: dict[str, str]) -> None:
    """meta.json carries the run's labels (the catalog groups runs by them); the child has exited."""
    path = folder / META_FILE
    if not labels or not path.exists():
        return
    try:
        meta = Meta.load(path)
    except UserError:  # unreadable: the analysis says so; the labels are not worth a second error
        return
    meta.labels = dict(labels)
    meta.write(path)


def _record_history(args: argparse.Namespace, folder: Path) -> None:
    """Record the analysed run in the catalog (history/catalog.py: the one named, else history.sqlite
    beside the folder). Never the run's failure: one line, and the run keeps its exit code."""
    from capacity_plugins.history.catalog import recording_where

    where = recording_where(args.history, folder.parent)
    if where is None:
        return
    if not (folder / "summary.json").exists():  # not analysed here (a worker-only install) or it failed
        print(f"[capacity] history: not recorded (not analysed); later: capacity history add {folder}",
              file=sys.stderr, flush=True)
        return
    from capacity_plugins.history.record import record_analysed  # the analysis' imports: it ran here

    recorded, line = record_analysed(folder, where)
    print(f"[capacity] history: {line}", file=sys.stdout if recorded else sys.stderr, flush=True)


def _incomplete_reason(outcome: _Outcome) -> str | None:
    """Why this run cannot stand as a complete measurement (None: it can)."""
    folder = outcome.folder
    if not (folder / "steps.json").exists():
        return f"locust exited with code {outcome.rc} before any step finished"
    records = folder / "requests.jsonl"
    if not records.exists() or records.stat().st_size == 0:
        return "no requests were recorded"
    try:
        meta = Meta.load(folder / META_FILE)
    except UserError:  # missing or unreadable: nothing said against the run
        meta = Meta()
    if meta.complete is False:
        return str(meta.incomplete_reason or "the run did not complete")
    if outcome.rc != 0:
        return f"locust exited with code {outcome.rc}"
    return None


def _analyse(args: argparse.Namespace, folder: Path, answered: list[str] | None = None) -> int:
    """Analyse a run (or a repeat set); EXIT_OK, or the code the analysis or a gate gives. The plain
    answer, its reasons in words and the report's path go to `answered`: the run's last lines."""
    from capacity_plugins.analysis.extra import ANALYSIS_INSTALL, missing_analysis_libs

    if missing_analysis_libs():
        # A worker-only install: the run is done and its folder complete; analyse it elsewhere.
        print(f"[capacity] not analysed here: the analysis needs: {ANALYSIS_INSTALL}; "
              f"then: capacity analyze {folder}", flush=True)
        if args.fail_on_slo or args.fail_on_verdict:
            print("[capacity] --fail-on-slo / --fail-on-verdict: no gate without the analysis",
                  file=sys.stderr, flush=True)
            return EXIT_BAD_INPUT
        return EXIT_OK
    from capacity_plugins.analysis.gate import gate
    from capacity_plugins.analysis.outcome import exit_code
    from capacity_plugins.outputs import analyze

    try:
        summary = analyze(folder, progress=lambda m: print(f"[capacity] {m}", flush=True))
    except UserError as e:
        print(f"[capacity] analysis failed: {e}", file=sys.stderr, flush=True)
        return EXIT_RUN_FAILED
    if answered is not None:
        answered.extend(answer_block(summary, folder))
    failed = gate(summary, args.fail_on_slo, args.fail_on_verdict)
    for line in failed:
        print(f"[capacity] {line}", file=sys.stderr, flush=True)
    for reason in summary.outcome.reasons:
        print(f"[capacity] no decision: {reason}", file=sys.stderr, flush=True)
    return exit_code(summary, failed)


def answer_block(summary: AnySummary, folder: Path) -> list[str]:
    """The run's last lines: the plain answer, its reasons in words, the report (analysis/answer.py)."""
    from capacity_plugins.analysis.answer import answer_lines

    lines = answer_lines(summary)
    out = [f"[capacity] answer: {lines[0]}", *(f"[capacity] {x}" for x in lines[1:])]
    if (folder / "report.html").exists():
        out.append(f"[capacity] report: {folder / 'report.html'}")
    return out


def _write_repeat_set(folder: Path, runs: list[Path], scenario: Scenario) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"scenario": scenario.name, "repeats": [r.name for r in runs]}
    (folder / "repeats.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")


def main(argv: list[str]) -> int:
    args = _parse(argv)
    scenario = load_scenario(args.scenario)
    if args.target_url is not None:
        scenario = with_target_url(scenario, args.target_url)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"

    if args.worker:
        print(f"[capacity] worker of {args.master_host}:{args.master_port} for scenario {scenario.name}", flush=True)
        rc, _ = run_child(locust_command(scenario, args, None, None, None), env)
        return EXIT_OK if rc in (0, -signal.SIGTERM) else (EXIT_BAD_INPUT if rc == 2 else EXIT_RUN_FAILED)

    writable_parent("--output" if args.output else "output", Path(args.output or scenario.output))
    check_corpus(scenario)
    scenario.load.check_inputs(scenario)  # a trace's bad line is exit 2 before anything starts
    scenario_secrets(scenario)  # a secret too short to redact is bad input, before anything starts
    repeats = args.repeat or scenario.repeat
    folder = results_folder(scenario, args.output)
    if args.web:
        _run_once(args, scenario, folder, env)
        # Ctrl-C is how a web session ends; each test was analysed when it stopped.
        print(f"[capacity] results: {folder.parent}", flush=True)
        return EXIT_OK

    outcomes: list[_Outcome] = []
    for i in range(1, repeats + 1):
        run_folder = folder / f"repeat-{i}" if repeats > 1 else folder
        if repeats > 1:
            print(f"[capacity] repeat {i}/{repeats}", flush=True)
            _write_repeat_set(folder, [folder / f"repeat-{k}" for k in range(1, i + 1)], scenario)
        outcome = _run_once(args, scenario, run_folder, env)
        _write_labels(run_folder, {**scenario.labels, **args.labels})
        outcomes.append(outcome)
        if outcome.stopped_by is not None:
            break
        if outcome.rc != 0 and not (run_folder / "steps.json").exists():
            raise RunError(f"locust exited with code {outcome.rc} before any step finished; "
                           f"results (if any) in {run_folder}")

    code = EXIT_OK
    answered: list[str] = []
    if not args.no_analyze and any((o.folder / "steps.json").exists() for o in outcomes):
        code = _analyse(args, folder, answered)
        _record_history(args, folder)
    stopped_by = outcomes[-1].stopped_by
    reasons = [r for r in (_incomplete_reason(o) for o in outcomes) if r]
    suffix = " (incomplete: interrupted)" if stopped_by is not None else (" (incomplete)" if reasons else "")
    print(f"[capacity] results: {folder}{suffix}", flush=True)
    for line in answered:  # the answer ends the run: the last thing a person reads
        print(line, flush=True)
    if stopped_by is not None:
        # 130 Ctrl-C, 143 SIGTERM. An interrupted run is incomplete, so its analysis never
        # completes a decision (1) nor judges a gate: the interruption is the news.
        return 128 + stopped_by
    if reasons and code in (EXIT_OK, EXIT_GATE_FAILED):
        # What finished is analysed, but the run was not done: a decision cannot rest on it.
        print(f"[capacity] the run is incomplete: {reasons[0]}", file=sys.stderr, flush=True)
        return EXIT_RUN_FAILED
    return code
