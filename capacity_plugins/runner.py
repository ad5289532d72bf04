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
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.folders import new_results_folder
from capacity_plugins.errors import (
    EXIT_BAD_INPUT,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    CommandParser,
    RunError,
    UserError,
)
from capacity_plugins.scenario import Scenario, load_scenario

LOCUSTFILE = Path(__file__).resolve().parent / "load" / "locustfile.py"
PREFLIGHT_TIMEOUT_S = 10.0


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity run", description="Run a capacity rehearsal described by a scenario file.")
    p.add_argument("scenario", help="scenario YAML (see scenarios/*.yaml)")
    p.add_argument("--output", help="parent folder for the results (default: the scenario's `output`)")
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
    p.add_argument("--no-analyze", action="store_true", help="skip the analysis at the end")
    p.add_argument("--skip-preflight", action="store_true", help="do not check the target before the run")
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.master and args.worker:
        raise UserError("--master and --worker exclude each other")
    if args.processes is not None and (args.processes == 0 or args.processes < -1):
        raise UserError("--processes: must be a positive number (or -1 for one per CPU)")
    if args.web and args.worker:
        raise UserError("--web has no meaning on a worker")
    return args


# -- preflight ----------------------------------------------------------------------------------------------


@dataclass
class _Sample:
    """The one-request preflight prompt (SampleLike for the dialects)."""

    id: str = "preflight"
    max_tokens: int | None = 4

    @property
    def text(self) -> str:
        return "Say OK."

    def as_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.text}]


# Set by preflight(): unverified only when the scenario opts in with target.insecure (as the users do).
_TLS_CONTEXT: ssl.SSLContext | None = None


def _http(method: str, url: str, headers: dict[str, str], body: bytes | None = None,
          timeout: float = PREFLIGHT_TIMEOUT_S) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_TLS_CONTEXT) as r:  # noqa: S310 -- http(s) only, validated
            return r.status, r.read(1 << 20)
    except urllib.error.HTTPError as e:
        return e.code, e.read(4096)


def _auth_headers(s: Scenario) -> dict[str, str]:
    headers = dict(s.target.headers)
    if s.target.api_key_env:
        key = os.environ.get(s.target.api_key_env)
        if not key:
            raise UserError(f"target.api_key_env: environment variable {s.target.api_key_env} is not set or empty")
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _served_models(s: Scenario, url: str, headers: dict[str, str]) -> list[str] | None:
    """Model names the server lists (None when the dialect has no listing we know)."""
    d = s.target.dialect
    path = {"openai-chat": "/v1/models", "openai-completions": "/v1/models", "tgi": "/info", "ollama": "/api/tags",
            "ollama-generate": "/api/tags"}[d]
    status, body = _http("GET", url + path, headers)
    if status >= 400:
        if d.startswith("openai") and status == 404:
            return None  # some OpenAI-compatible gateways do not list models
        raise RunError(f"preflight: GET {path} answered HTTP {status}: {body[:200].decode(errors='replace')}")
    try:
        data = json.loads(body)
    except ValueError:
        raise RunError(f"preflight: GET {path} did not return JSON") from None
    if d == "tgi":
        return [str(data.get("model_id"))] if isinstance(data, dict) and data.get("model_id") else None
    if d.startswith("ollama"):
        return [str(m.get("name")) for m in data.get("models", [])] if isinstance(data, dict) else None
    return [str(m.get("id")) for m in data.get("data", [])] if isinstance(data, dict) else None


def preflight(s: Scenario, url: str) -> str:
    """Check the target answers, serves the model and completes one request; returns the model to use.

    Raises RunError (exit 1) naming what failed.
    """
    from capacity_plugins.dialects import RequestParams, get_dialect

    global _TLS_CONTEXT
    _TLS_CONTEXT = ssl._create_unverified_context() if s.target.insecure else None  # noqa: S323 - opt-in
    headers = {"Accept-Encoding": "identity", **_auth_headers(s)}
    try:
        models = _served_models(s, url, headers)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RunError(f"preflight: target {url} does not answer: {reason}") from None
    model = s.target.model
    if model is None:
        if s.target.dialect != "tgi" and not models:
            raise RunError(f"preflight: {url} lists no model; set target.model in the scenario")
        model = models[0] if models else ""
    elif models is not None and s.target.dialect != "tgi":
        names = set(models) | {m.removesuffix(":latest") for m in models}
        if model not in names:
            raise RunError(f"preflight: model {model!r} is not served by {url} (it serves: {', '.join(models[:10])})")
    dialect = get_dialect(s.target.dialect)
    params = RequestParams(model=model, max_tokens=4, stream=False, include_usage=False)
    call = dialect.build(_Sample(), params)
    try:
        status, body = _http(call.method, url + call.path, {**headers, **call.headers}, call.body,
                             timeout=min(s.request.timeout_s, 120.0))
    except (urllib.error.URLError, OSError) as e:
        raise RunError(f"preflight: test request to {call.path} failed: {getattr(e, 'reason', e)}") from None
    if status >= 400:
        raise RunError(f"preflight: test request to {call.path} answered HTTP {status}: "
                       f"{body[:200].decode(errors='replace')}")
    return model


# -- the run ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def results_folder(s: Scenario, output: str | None) -> Path:
    return new_results_folder(output or s.output, s.name)


def locust_command(s: Scenario, args: argparse.Namespace, url: str | None, model: str | None, folder: Path | None) -> list[str]:
    """The Locust child's command line: the scenario file plus only what this run decided itself
    (target URL, results folder, the model the preflight found); the child reads every other
    setting from the scenario (load/options.py)."""
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(Path(args.scenario).resolve())]
    if args.worker:
        return cmd + ["--worker", "--master-host", args.master_host, "--master-port", str(args.master_port)]
    assert folder is not None and url is not None
    cmd += ["--host", url, "--results-dir", str(folder)]
    if model and model != (s.target.model or ""):
        cmd += ["--model", model]
    # Failed requests are data, not a failed run (docs/exit-codes.md).
    cmd += ["--exit-code-on-error", "0", "--loglevel", "WARNING"]
    cmd += ["--csv", str(folder / "locust"), "--html", str(folder / "locust_report.html")]
    if args.web:
        cmd += ["--web-host", args.bind, "--web-port", str(args.web_port)]
    else:
        cmd += ["--headless", "--only-summary"]
    if args.processes is not None:
        port = _free_port()
        # Local worker processes: the master listens on loopback only, whatever --bind says.
        cmd += ["--processes", str(args.processes), "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--master-host", "127.0.0.1", "--master-port", str(port)]
    elif args.master:
        cmd += ["--master", "--expect-workers", str(args.expect_workers), "--master-bind-host", args.bind,
                "--master-bind-port", str(args.master_bind_port)]
    if args.exporter_port is not None:
        cmd += ["--exporter-port", str(args.exporter_port), "--exporter-host", args.bind]
    return cmd


class _Interrupted:
    def __init__(self) -> None:
        self.signal: int | None = None


def _run_child(cmd: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run Locust in its own session (a terminal's Ctrl-C reaches only us); Ctrl-C / SIGTERM here
    become one SIGINT to Locust, which stops cleanly on it: users stopped, in-flight requests
    recorded as cancelled, files written. A second Ctrl-C kills the whole group."""
    state = _Interrupted()
    # A background job of a non-interactive shell starts with SIGINT ignored, and Locust would
    # inherit that and never stop on our forwarded SIGINT: give the child the default disposition.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_default_signals)

    def forward(signum: int, _frame: Any) -> None:
        if state.signal is None:
            state.signal = signum
            print("\n[capacity] stopping: in-flight requests are recorded as cancelled …", file=sys.stderr, flush=True)
            # Only the Locust master/local process: it stops its workers itself and waits for their
            # last records; signalling the workers too would make them quit before shipping those.
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        else:  # a second Ctrl-C: stop waiting
            _signal_group(proc, signal.SIGKILL)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except InterruptedError:  # pragma: no cover
                continue
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return rc, state.signal is not None


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _mark_incomplete(folder: Path, reason: str) -> None:
    """meta.json says the run is incomplete, even when Locust died before writing it."""
    path = folder / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError:
        meta = {}
    meta["complete"] = False
    meta.setdefault("incomplete_reason", reason)
    tmp = path.with_name("meta.json.tmp")
    tmp.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _check_corpus(s: Scenario) -> None:
    """Load the corpus once here so a bad one is exit 2 before a simulator or a preflight starts."""
    from capacity_plugins.corpus import load_corpus

    try:
        load_corpus(s.corpus_path(), min_distinct=s.corpus.min_distinct)
    except UserError as e:
        where = f"{s.source_path}: " if s.source_path else ""
        raise UserError(f"{where}corpus: {e}") from None


def main(argv: list[str]) -> int:
    args = _parse(argv)
    scenario = load_scenario(args.scenario)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"

    if args.worker:
        print(f"[capacity] worker of {args.master_host}:{args.master_port} for scenario {scenario.name}", flush=True)
        rc, _ = _run_child(locust_command(scenario, args, None, None, None), env)
        return EXIT_OK if rc in (0, -signal.SIGTERM) else (EXIT_BAD_INPUT if rc == 2 else EXIT_RUN_FAILED)

    _check_corpus(scenario)
    sim = None
    folder = results_folder(scenario, args.output)
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
            model = preflight(scenario, url)
            print(f"[capacity] preflight ok: {url} serves {model or 'its model'}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"[capacity] results → {folder}", flush=True)
        rc, interrupted = _run_child(locust_command(scenario, args, url, model, folder), env)
    finally:
        if sim is not None:
            sim.stop()

    if rc == 2 and not interrupted:
        raise UserError("Locust rejected the options (see the message above)")
    if args.web:
        # Ctrl-C is how a web session ends; each test was analysed when it stopped (rehearsal.py).
        print(f"[capacity] results: {folder.parent}", flush=True)
        return EXIT_OK
    if interrupted:
        _mark_incomplete(folder, "interrupted (Ctrl-C / SIGTERM)")
    elif rc != 0:
        _mark_incomplete(folder, f"locust exited with code {rc}")
        if not (folder / "steps.json").exists():
            raise RunError(f"locust exited with code {rc} before any step finished; results (if any) in {folder}")

    code = EXIT_OK
    if not args.no_analyze and (folder / "steps.json").exists():
        from capacity_plugins.cli import ANALYSIS_INSTALL, missing_analysis_libs

        analyze: Callable[..., dict[str, Any]] | None = None
        if missing_analysis_libs():
            # A worker-only install: the run is done and its folder complete; analyse it elsewhere.
            print(f"[capacity] not analysed here: the analysis needs: {ANALYSIS_INSTALL}; "
                  f"then: capacity analyze {folder}", flush=True)
            if args.fail_on_slo or args.fail_on_verdict:
                print("[capacity] --fail-on-slo / --fail-on-verdict: no gate without the analysis",
                      file=sys.stderr, flush=True)
                code = EXIT_BAD_INPUT
        else:
            from capacity_plugins.analysis import analyze as analyze_folder

            analyze = analyze_folder
        if analyze is not None:
            try:
                summary = analyze(folder, progress=lambda m: print(f"[capacity] {m}", flush=True))
            except UserError as e:
                print(f"[capacity] analysis failed: {e}", file=sys.stderr, flush=True)
                summary = None
            if summary is not None:
                verdict = (summary.get("verdict") or {}).get("decision")
                if verdict:
                    print(f"[capacity] verdict: {verdict}", flush=True)
                if (folder / "report.html").exists():
                    print(f"[capacity] report: {folder / 'report.html'}", flush=True)
                from capacity_plugins.analysis.gate import gate

                for failed in gate(summary, args.fail_on_slo, args.fail_on_verdict):
                    print(f"[capacity] {failed}", file=sys.stderr, flush=True)
                    code = EXIT_GATE_FAILED
    print(f"[capacity] results: {folder}" + (" (incomplete: interrupted)" if interrupted else ""), flush=True)
    if interrupted:
        return 130 if code == EXIT_OK else code
    if rc != 0 and code == EXIT_OK:
        # Locust crashed after some steps: what finished is analysed, but the run was not done.
        print(f"[capacity] locust exited with code {rc}: the run is incomplete", file=sys.stderr, flush=True)
        return EXIT_RUN_FAILED
    return code
