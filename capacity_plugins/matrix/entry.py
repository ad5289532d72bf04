"""One entry of the matrix: start → ready → `capacity run --target-url` → analyse → teardown.

The teardown runs whatever happened before it (a failed start, a run error, Ctrl-C). Every
failure becomes the entry's row with the stage it failed at and why; only an interruption stops
the matrix. The run goes through the runner's own `main` (runner/), so its preflight, Locust
child, Ctrl-C handling and results folder are exactly `capacity run`'s; the analysis is
`capacity_plugins.analyze` with the entry's GPUs and price as overrides.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from capacity_plugins.contracts.redaction import strip_userinfo
from capacity_plugins.contracts.summary import AnySummary
from capacity_plugins.errors import RunError, UserError
from capacity_plugins.matrix.server import EntryFailed, Server, default_ready_path, fill, free_port
from capacity_plugins.matrix.spec import Entry, Matrix
from capacity_plugins.scenario import Scenario

INTERRUPTED = (130, 143)  # capacity run stopped by Ctrl-C / SIGTERM


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the matrix: stop after this entry's teardown."""

    def __init__(self, code: int) -> None:
        super().__init__(f"interrupted (exit {code})")
        self.code = code


@dataclass
class Outcome:
    entry: Entry
    folder: Path
    url: str
    gpus: int
    gpu_hour_usd: float | None
    status: str = "ok"  # ok | failed | interrupted | not run
    stage: str | None = None
    reason: str | None = None
    run_dir: Path | None = None
    summary: AnySummary | None = None
    teardown: str | None = None  # a teardown problem
    timings_s: dict[str, float] = field(default_factory=dict)
    interrupted: int | None = None  # the exit code (130 / 143) when the matrix was stopped here

    def fail(self, stage: str, reason: str) -> None:
        self.status, self.stage, self.reason = "failed", stage, reason


def _say(entry: Entry, msg: str) -> None:
    print(f"[matrix] {entry.name}: {msg}", flush=True)


def _run_dir(folder: Path) -> Path | None:
    runs = [p for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def run_entry(matrix: Matrix, entry: Entry, scenario: Scenario, headers: dict[str, str], root: Path,
              history: str | None = None) -> Outcome:
    from capacity_plugins.dialects import get_dialect

    folder = root / entry.name
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port() if entry.needs_port else None
    server = Server(entry, folder, port, headers, scenario.target.insecure)
    out = Outcome(entry, folder, strip_userinfo(server.url),
                  gpus=entry.gpus if entry.gpus is not None else scenario.capacity.gpus_per_node,
                  gpu_hour_usd=entry.gpu_hour_usd if entry.gpu_hour_usd is not None else scenario.capacity.gpu_hour_usd)
    t0 = time.monotonic()
    stage = "start"
    try:
        server.start()
        stage = "ready"
        if entry.command:
            _say(entry, f"started: {fill(entry.command, port)} — waiting until {out.url} is ready")
        ready = server.wait_ready(default_ready_path(get_dialect(scenario.target.dialect,
                                                                 scenario.target.triton_fields()),
                                                     scenario.target.model))
        out.timings_s["ready"] = time.monotonic() - t0
        _say(entry, f"ready ({strip_userinfo(ready)} answered after {out.timings_s['ready']:.1f} s)")
        stage = "run"
        t1 = time.monotonic()
        _run(matrix, server.url, folder, out)
        out.timings_s["run"] = time.monotonic() - t1
        if out.status == "ok":
            stage = "analysis"
            t2 = time.monotonic()
            _analyse(out)
            out.timings_s["analysis"] = time.monotonic() - t2
            if history is not None and out.summary is not None:
                _record(out, history, matrix.name)
    except EntryFailed as e:
        out.fail(stage, str(e))
    except RunError as e:
        out.fail(stage, f"run failed: {e}")
    except UserError as e:
        out.fail(stage, f"{stage} refused: {e}")
    except (KeyboardInterrupt, Interrupted) as e:
        out.status, out.stage = "interrupted", stage
        out.interrupted = e.code if isinstance(e, Interrupted) else 130
        out.reason = "interrupted (Ctrl-C)" if out.interrupted == 130 else "interrupted (SIGTERM)"
    finally:
        t3 = time.monotonic()
        out.teardown = server.stop()
        out.timings_s["teardown"] = time.monotonic() - t3
        out.timings_s["total"] = time.monotonic() - t0
        if out.teardown:
            _say(entry, f"teardown: {out.teardown}")
    if out.status != "ok":
        _say(entry, f"{out.status}: {out.reason}")
    return out


def _run(matrix: Matrix, url: str, folder: Path, out: Outcome) -> None:
    from capacity_plugins.runner import main as capacity_run

    code = capacity_run([str(matrix.scenario), "--target-url", url, "--output", str(folder), "--no-analyze"])
    out.run_dir = _run_dir(folder)
    if code in INTERRUPTED:
        raise Interrupted(code)
    if out.run_dir is None or not (out.run_dir / "steps.json").exists():
        out.fail("run", f"capacity run exited with code {code} without a finished step")
    # Exit 1 with steps (an incomplete run) is analysed: the analysis' outcome says why it decides nothing.


def _record(out: Outcome, where: str, matrix_name: str) -> None:
    """The analysed entry into the run catalog, labelled with its matrix and entry: one line, never
    the entry's failure (history/record.py)."""
    from capacity_plugins.history.record import record_analysed

    assert out.run_dir is not None
    _, line = record_analysed(out.run_dir, where, {"matrix": matrix_name, "matrix_entry": out.entry.name})
    _say(out.entry, f"history: {line}")


def _analyse(out: Outcome) -> None:
    from capacity_plugins.outputs import analyze

    assert out.run_dir is not None
    overrides = {"gpus_per_node": out.gpus, "gpu_hour_usd": out.gpu_hour_usd}
    try:
        summary = analyze(out.run_dir, overrides=overrides, progress=lambda m: _say(out.entry, m))
    except UserError as e:
        out.fail("analysis", f"analysis failed: {e}")
        return
    out.summary = summary
    reasons = summary.outcome.reasons
    if reasons:
        out.fail("decision", "no decision: " + "; ".join(reasons))
