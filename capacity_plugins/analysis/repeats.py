"""A repeat set: the same rehearsal run several times, analysed as one.

The runner writes a set folder holding `repeats.json` (`{"repeats": ["repeat-1", "repeat-2", ...]}`)
and one ordinary results folder per repeat inside it. `capacity analyze SET` analyses each repeat
(each gets its own summary and report) and writes the set's summary.json / summary.md /
report.html with the run-to-run spread: per level (throughput, latency percentiles), for the
capacity and for the knee.

Within-run intervals describe one run; the spread between repeats is what a second run of the
same system really does (caches, placement, thermal state, neighbours). The set's capacity is the
mean over the repeats with a Student-t interval on the repeats' values, and the set's plan sizes
the fleet from it, refusing like a single run's plan when that interval is too wide.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.analysis.intervals import t_interval
from capacity_plugins.analysis.plan import make_plan
from capacity_plugins.analysis.settings import read_settings
from capacity_plugins.contracts.summary import (
    Capacity,
    LevelStats,
    Outcome,
    RepeatEntry,
    RepeatSetSummary,
    SetKnee,
    SetLevel,
    StepSummary,
    Summary,
    SummaryMeta,
    Verdict,
)
from capacity_plugins.errors import UserError

REPEATS_FILE = "repeats.json"
# Per-level figures whose run-to-run spread the set reports (and `capacity compare` judges): a
# field of the set's level (contracts/summary.py `SetLevel`) ← the same figure of a repeat's step.
LEVEL_FIGURES: dict[str, Callable[[StepSummary], float | None]] = {
    "rps": lambda r: r.rps, "goodput_rps": lambda r: r.goodput_rps, "ttft_p95_ms": lambda r: r.ttft_p95_ms,
    "e2e_p50_ms": lambda r: r.e2e_p50_ms, "e2e_p95_ms": lambda r: r.e2e_p95_ms, "e2e_p99_ms": lambda r: r.e2e_p99_ms,
    "gpu_util_pct": lambda r: r.gpu_util_pct,
}


def is_repeat_set(path: Path) -> bool:
    return (Path(path) / REPEATS_FILE).is_file()


def read_repeats(path: Path) -> list[Path]:
    """The repeat folders a set lists, checked (one line naming repeats.json and the entry)."""
    f = Path(path) / REPEATS_FILE
    try:
        doc = orjson.loads(f.read_bytes())
    except orjson.JSONDecodeError as e:
        raise UserError(f"{REPEATS_FILE}: invalid JSON ({e})") from None
    except OSError as e:
        raise UserError(f"{REPEATS_FILE}: cannot read ({e.strerror})") from None
    names = doc.get("repeats") if isinstance(doc, dict) else None
    if not isinstance(names, list) or not names:
        raise UserError(f"{REPEATS_FILE}: expected {{\"repeats\": [\"repeat-1\", ...]}} with at least one folder")
    out = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            raise UserError(f"{REPEATS_FILE}: repeats[{i}]: expected a folder name inside the set, got {name!r}")
        folder = Path(path) / name
        if not folder.is_dir():
            raise UserError(f"{REPEATS_FILE}: repeats[{i}]: {name}: no such folder in {path}")
        out.append(folder)
    return out


def _stats(values: list[float | None], confidence: float) -> LevelStats:
    v = [x for x in values if x is not None]
    mean, sd, lo, hi = t_interval(v, confidence)
    return LevelStats(mean=mean, sd=sd, min=min(v) if v else None, max=max(v) if v else None,
                      ci=[lo, hi] if lo is not None and hi is not None else None, n=len(v), values=values)


def _levels(names: list[str], summaries: list[Summary], confidence: float) -> list[SetLevel]:
    levels = sorted({r.level for s in summaries for r in s.steps})
    out = []
    for lv in levels:
        rows = [next((r for r in s.steps if r.level == lv and r.valid), None) for s in summaries]
        figures = {m: _stats([get(r) if r else None for r in rows], confidence) for m, get in LEVEL_FIGURES.items()}
        rps = figures["rps"]
        out.append(SetLevel(
            level=lv, valid_repeats=[n for n, r in zip(names, rows, strict=True) if r],
            invalid_repeats=[n for n, r in zip(names, rows, strict=True) if r is None],
            **figures,
            rps_relative_spread=((rps.max - rps.min) / rps.mean)
            if rps.n >= 2 and rps.mean and rps.max is not None and rps.min is not None else None,
        ))
    return out


def summarise_set(path: Path, names: list[str], summaries: list[Summary],
                  overrides: dict[str, Any] | None = None) -> RepeatSetSummary:
    settings = read_settings(Path(path) / names[0], overrides)
    conf = settings.verdict.confidence
    caps = [s.capacity.per_node_rps for s in summaries]
    cap_stats = _stats(caps, conf)
    known = [s for s in summaries if s.capacity.per_node_rps is not None]
    capacity = Capacity(
        per_node_rps=cap_stats.mean, per_node_rps_ci=cap_stats.ci, sd=cap_stats.sd,
        min=cap_stats.min, max=cap_stats.max, values=caps, n=cap_stats.n,
        methods=[s.capacity.method for s in summaries], method="repeats",
        interval_kind="run_to_run" if cap_stats.ci else "within_run",
        per_node_concurrency=_stats([s.capacity.per_node_concurrency for s in summaries], conf).mean,
        relative_interval=None, notes=[],
    )
    if cap_stats.ci is None and len(known) == 1:
        # One repeat with a capacity: only its within-run interval is known (it understates).
        capacity.per_node_rps_ci = known[0].capacity.per_node_rps_ci
        capacity.notes.append("only one repeat has a capacity: its within-run interval stands in for the spread")
    ci, mean = capacity.per_node_rps_ci, capacity.per_node_rps
    if ci and mean and ci[0] is not None and ci[1] is not None:
        capacity.relative_interval = (ci[1] - ci[0]) / mean
    if len(known) < len(summaries):
        capacity.notes.append(f"{len(summaries) - len(known)} repeat(s) have no capacity under the SLO")
    knees = [s.knee.value for s in summaries]
    found = [k for k in knees if k is not None]
    knee = SetKnee(values=knees, min=min(found) if found else None, max=max(found) if found else None,
                   agree=len(set(knees)) == 1, unit=summaries[0].knee.unit)
    plan = make_plan(capacity, settings.capacity, settings.verdict)
    decisions = [s.verdict.decision for s in summaries]
    if plan.refused and settings.capacity.peak_qps is not None:
        verdict = Verdict(decision="observe", reasons=[f"no fleet size from the set: {plan.refused}"])
    elif len(set(decisions)) == 1:
        verdict = Verdict(decision=decisions[0],
                          reasons=[f"all {len(decisions)} repeats agree"] + summaries[0].verdict.reasons)
    else:
        verdict = Verdict(decision="observe", reasons=["the repeats disagree: " + ", ".join(
            f"{n} {d}" for n, d in zip(names, decisions, strict=True)) + " — the decision is within run-to-run noise"])
    warnings = [f"{n}: {w}" for n, s in zip(names, summaries, strict=True) for w in s.warnings]
    reasons = [f"{n}: {r}" for n, s in zip(names, summaries, strict=True) for r in s.outcome.reasons]
    if plan.refused and settings.capacity.peak_qps is not None:
        reasons.append(f"plan refused: {plan.refused}")
    first = summaries[0]
    return RepeatSetSummary(
        schema_version=first.schema_version, kind="repeat_set", name=first.name,
        sweep_kind=first.sweep_kind, run=first.run.model_copy(update={"repeats": names}),
        slo=first.slo, verdict_settings=settings.verdict,
        repeats=[RepeatEntry(name=n, per_node_rps=s.capacity.per_node_rps,
                             per_node_rps_ci=s.capacity.per_node_rps_ci, knee=s.knee.value,
                             decision=s.verdict.decision, nodes=s.plan.nodes,
                             valid_steps=sum(1 for r in s.steps if r.valid),
                             slo_missed_levels=[r.level for r in s.steps if r.valid and not r.slo_pass],
                             decision_complete=s.outcome.decision_complete)
                 for n, s in zip(names, summaries, strict=True)],
        levels=_levels(names, summaries, conf), capacity=capacity, knee=knee, plan=plan, verdict=verdict,
        warnings=warnings, outcome=Outcome(decision_complete=not reasons, reasons=reasons),
        meta=_set_meta(path, first),
    )


def _set_meta(path: Path, first: Summary) -> SummaryMeta:
    """The set's meta: where it is, and the labels its runs were given (the same for every repeat)."""
    meta = SummaryMeta(results_dir=str(path))
    if first.meta.labels:
        meta.labels = dict(first.meta.labels)
    return meta


def summarise_repeats(path: Path, overrides: dict | None = None, progress: Callable[[str], None] | None = None
                      ) -> tuple[RepeatSetSummary, list[tuple[Path, Summary]]]:
    """The set's summary and each repeat's (folder, summary).

    Every repeat is read and judged before the caller writes anything, so a bad repeat is exit 2
    with no half-written set; each repeat's data is dropped once summarised (one run in memory at a
    time).
    """
    from capacity_plugins.analysis.load import load_run
    from capacity_plugins.analysis.pipeline import summarise

    say = progress or (lambda _m: None)
    folders = read_repeats(path)
    summaries = []
    for f in folders:
        say(f"repeat {f.name}")
        try:
            summaries.append(summarise(load_run(f, overrides, say), say))
        except UserError as e:  # name the repeat: every repeat has a requests.jsonl
            raise UserError(f"{f.name}/{e}") from None
    summary = summarise_set(path, [f.name for f in folders], summaries, overrides)
    return summary, list(zip(folders, summaries, strict=True))
