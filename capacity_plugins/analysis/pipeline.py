"""One pass from a results folder to its summary (what summary.json holds).

load → per-step table (with intervals and validity) → knee → capacity under SLO → plan + cost →
verdict + checklists → stability → run facts and outcome. Each stage reads the previous stage's
output only. The sections only some runs have (a capacity search, workload classes, a cache probe,
a trace replay, ...) are registered by name (analysis/sections.py): each stage asks every section
that applies to the run, and none is named here. Nothing here writes a file: the registered writers
(outputs/) do, asked by the caller (`capacity_plugins.analyze`, outputs/__init__.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from capacity_plugins import kinds
from capacity_plugins.analysis import distributions, sections
from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.analysis.capacity import capacity_under_slo
from capacity_plugins.analysis.knee import find_knee
from capacity_plugins.analysis.load import RunData, load_run
from capacity_plugins.analysis.outcome import NO_REQUESTS, outcome
from capacity_plugins.analysis.plan import make_cost, make_plan
from capacity_plugins.analysis.runfacts import redact_url, run_facts
from capacity_plugins.analysis.stability import Seen, streamed_stability
from capacity_plugins.analysis.table import conclude, step_rows
from capacity_plugins.analysis.ttft_breakdown import breakdown_notes
from capacity_plugins.analysis.validity import meta_warnings
from capacity_plugins.analysis.verdict import checklists, decide
from capacity_plugins.contracts.steps import STEP_KINDS
from capacity_plugins.contracts.summary import SCHEMA_VERSION, Summary, SummaryMeta

# load_run is the pipeline's first stage, summarise the rest
__all__ = ["SCHEMA_VERSION", "load_run", "summarise", "sweep_kind"]


def sweep_kind(run: RunData) -> str:
    """What the steps are measured in: the kind most of them have; with none, what the load kind says
    (`LoadKind.sweep`)."""
    counted = Counter(s.kind for s in run.steps)
    if counted:
        return counted.most_common(1)[0][0]
    kind = kinds.find(run.load_kind)
    if kind is not None:
        return kind.sweep
    # A copy that names its load by its steps' kind (an older one, or a hand-made folder: `kind: rate`).
    return run.load_kind if run.load_kind in STEP_KINDS else "concurrency"


def summarise(run: RunData, progress: Callable[[str], None] | None = None) -> Summary:
    say = progress or (lambda _m: None)
    kind = sweep_kind(run)
    say(f"per-step table ({len(run.steps)} steps)")
    present = [s for s in sections.registered() if s.applies(run)]
    # One walk over the records, step by step: the table, and what else reads each step's records
    # (the stability's span, the report's box plots, the sections' per-step figures)
    seen = Seen()
    run.gathered[distributions.NAME] = distributions.Distributions(run)
    for s in present:
        if (consumer := s.step_records(run)) is not None:
            run.gathered[s.name] = consumer
    rows = step_rows(run, run.slo, also=[seen, *run.gathered.values()])
    for s in present:  # e.g. workload classes: each judged by its own SLO, the step's SLO fields the mix's
        s.rows(run, rows)
    conclude(rows, run.slo, run.verdict)  # each step's one-line reading, once its SLO fields are final
    built = [(s, found) for s in present if (found := s.build(run, rows, kind)) is not None]
    knee = find_knee(rows, kind)
    cap = capacity_under_slo(rows, run.slo, run.capacity, kind, run.verdict.confidence)
    for s, found in built:  # e.g. the mix's capacity in place of the top-level one, a note on it
        cap = s.capacity(found, cap, run)
    plan = make_plan(cap, run.capacity, run.verdict)
    cost = make_cost(rows, cap, run.capacity)
    series = set(run.telemetry["series"].unique()) if run.telemetry is not None and not run.telemetry.empty else set()
    facts = run_facts(run.path, run.meta, run.settings, run.steps, rows)
    verdict = decide(rows, knee, cap, plan, bool(series & {"gpu_util_pct", "sm_active"}), run.slo, run.verdict,
                     run.settings.max_client_cpu_pct, facts.simulated)
    for s, found in built:  # e.g. a trace replay's first broken window comes first among the reasons
        s.verdict(found, verdict)
    warnings = meta_warnings(run.meta) + list(run.warnings)
    if not run.records.count:
        warnings.insert(0, f"requests.jsonl: {NO_REQUESTS}")
    if facts.simulated:
        warnings.append("the target was the embedded simulator: GPU and server readings are simulated, not measured")
    short = [f"{r.level:g}" for r in rows if r.insufficient and r.requests]
    if short:
        warnings.append(f"{len(short)} step(s) have fewer than {run.settings.min_requests} measured requests "
                        f"(load.min_requests) and decide nothing: levels {', '.join(short)}")
    for s, found in built:
        warnings += s.warnings(found, run)
    if not series:
        warnings.append("no telemetry_series.csv: GPU / queue columns are empty")
    summary = Summary(
        schema_version=SCHEMA_VERSION,
        name=run.name,
        sweep_kind=kind,
        run=facts,
        slo=run.slo,
        verdict_settings=run.verdict,
        min_requests=run.settings.min_requests,
        steps=rows,
        ttft_breakdown=breakdown_notes(series, run.meta),
        knee=knee,
        capacity=cap,
        plan=plan,
        cost=cost,
        verdict=verdict,
        stability=streamed_stability(seen, run.records, run.telemetry, run.load_kind),
        # The sections this run has (analysis/sections.py), each under its name: a capacity search's
        # account, workload classes, a cache probe's comparison, a trace replay's windows, ...
        **{s.name: found for s, found in built},
        warnings=warnings,
        meta=_meta(run),
        checklist=checklists(rows, cap, cost, plan, run.meta, series, run.slo, run.verdict),
        outcome=outcome(rows, plan, facts, run.records.count, run.meta),
    )
    summary.answer = plain_answer(summary)  # the one sentence every view opens with (analysis/answer.py)
    return summary


def _meta(run: RunData) -> SummaryMeta:
    meta = SummaryMeta(**{k: getattr(run.meta, k) for k in SummaryMeta.COPIED if k in run.meta.model_fields_set})
    if run.meta.target:  # never a URL password in a summary
        meta.target = redact_url(str(run.meta.target))
    meta.requests_total = run.records.count
    meta.results_dir = str(run.path)
    return meta
