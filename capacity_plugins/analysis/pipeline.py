"""One pass from a results folder to summary.json / summary.md / report.html / PNGs.

load → per-step table → knee → capacity under SLO → plan + cost → verdict + checklists →
stability → outputs. Each stage reads the previous stage's output only.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capacity_plugins.analysis.capacity import capacity_under_slo
from capacity_plugins.analysis.knee import find_knee
from capacity_plugins.analysis.load import RunData, dumps_json, load_run
from capacity_plugins.analysis.plan import make_cost, make_plan
from capacity_plugins.analysis.stability import stability
from capacity_plugins.analysis.table import step_rows
from capacity_plugins.analysis.verdict import checklists, decide

SCHEMA_VERSION = 1


def sweep_kind(run: RunData) -> str:
    kinds = Counter(s.kind for s in run.steps)
    if kinds:
        return kinds.most_common(1)[0][0]
    return {"rate": "rate", "rate_sweep": "rate", "peak": "peak"}.get(run.load_kind or "", "concurrency")


def summarise(run: RunData, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    kind = sweep_kind(run)
    say(f"per-step table ({len(run.steps)} steps)")
    rows = step_rows(run, run.slo)
    knee = find_knee(rows, kind)
    cap = capacity_under_slo(rows, run.slo, run.capacity, kind)
    plan = make_plan(cap, run.capacity)
    cost = make_cost(rows, cap, run.capacity)
    series = set(run.telemetry["series"].unique()) if run.telemetry is not None and not run.telemetry.empty else set()
    verdict = decide(rows, knee, cap, plan, bool(series & {"gpu_util_pct", "sm_active"}), run.slo)
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": run.name,
        "sweep_kind": kind,
        "slo": run.slo.model_dump(),
        "steps": rows,
        "knee": knee,
        "capacity": cap,
        "plan": plan,
        "cost": cost,
        "verdict": verdict,
        "stability": stability(run.requests, run.telemetry, run.load_kind),
        "warnings": list(run.warnings),
        "meta": _meta(run),
    }
    summary["checklist"] = checklists(summary, run.meta, series, run.slo)
    if not series:
        summary["warnings"].append("no telemetry_series.csv: GPU / queue columns are empty")
    return summary


def _meta(run: RunData) -> dict[str, Any]:
    keep = ("versions", "target", "model", "server", "dialect", "gpu", "gpus", "gpu_names", "incomplete", "incomplete_reason",
            "start_unix", "end_unix", "records", "workers")
    meta = {k: run.meta[k] for k in keep if k in run.meta}
    meta["requests_total"] = len(run.requests)
    meta["results_dir"] = str(run.path)
    return meta


def analyze(results_dir: Path, *, overrides: dict | None = None, progress: Callable[[str], None] | None = None,
            report: bool = True) -> dict[str, Any]:
    """Analyse a results folder, write summary.json (+ summary.md, report.html, PNGs) and return the summary."""
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    results_dir = Path(results_dir)
    run = load_run(results_dir, overrides, say)
    summary = summarise(run, say)
    (results_dir / "summary.json").write_text(dumps_json(summary), encoding="utf-8")
    if report:
        from capacity_plugins.analysis.report import write_reports

        say("writing report.html, summary.md and plots")
        write_reports(summary, run, results_dir)
    say(f"analysis done in {time.perf_counter() - t0:.1f} s")
    return summary
