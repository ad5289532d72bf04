"""One pass from a results folder to its summary (what summary.json holds).

load → per-step table (with intervals and validity) → knee → capacity under SLO → plan + cost →
verdict + checklists → stability → run facts and outcome. Each stage reads the previous stage's
output only. Nothing here writes a file: the registered writers (outputs/) do, asked by the
caller (`capacity_plugins.analyze`, outputs/__init__.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from capacity_plugins import kinds
from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.analysis.cache_probe import cache_probe
from capacity_plugins.analysis.capacity import capacity_under_slo
from capacity_plugins.analysis.knee import find_knee
from capacity_plugins.analysis.load import RunData, load_run
from capacity_plugins.analysis.outcome import NO_REQUESTS, outcome
from capacity_plugins.analysis.plan import make_cost, make_plan
from capacity_plugins.analysis.runfacts import redact_url, run_facts
from capacity_plugins.analysis.stability import stability
from capacity_plugins.analysis.table import conclude, step_rows
from capacity_plugins.analysis.trace_windows import trace_summary
from capacity_plugins.analysis.ttft_breakdown import breakdown_notes
from capacity_plugins.analysis.validity import meta_warnings
from capacity_plugins.analysis.verdict import checklists, decide
from capacity_plugins.analysis.workloads import add_class_rows, class_warnings, mix_capacity
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
    rows = step_rows(run, run.slo)
    if run.settings.workloads:
        # Classes: each judged by its own SLO; the step's SLO fields become the mix's.
        add_class_rows(run, rows)
    conclude(rows, run.slo, run.verdict)  # each step's one-line reading, once its SLO fields are final
    knee = find_knee(rows, kind)
    cap = capacity_under_slo(rows, run.slo, run.capacity, kind)
    workloads = None
    if run.settings.workloads:
        # With classes the top-level SLO only sets defaults: plan and verdict use the mix's capacity.
        cap, workloads = mix_capacity(rows, run, kind)
    probe = cache_probe(run, rows, run.meta)
    if probe is not None:
        cap.notes.append(f"cache probe: capacity counts the distinct arm only; the {probe.arm} arm is "
                         "compared in the prefix-cache probe")
    plan = make_plan(cap, run.capacity, run.verdict)
    cost = make_cost(rows, cap, run.capacity)
    series = set(run.telemetry["series"].unique()) if run.telemetry is not None and not run.telemetry.empty else set()
    facts = run_facts(run.path, run.meta, run.settings, run.steps, rows)
    verdict = decide(rows, knee, cap, plan, bool(series & {"gpu_util_pct", "sm_active"}), run.slo, run.verdict,
                     run.settings.max_client_cpu_pct, facts.simulated)
    trace = trace_summary(rows, run.settings.load, run.slo, run.requests)
    if trace is not None:  # a replay is judged window by window: where in the traffic it broke comes first
        verdict.reasons.insert(0, trace.line)
        verdict.trace_first_broken_window = trace.first_broken_window
    warnings = meta_warnings(run.meta) + list(run.warnings)
    if not len(run.requests):
        warnings.insert(0, f"requests.jsonl: {NO_REQUESTS}")
    if facts.simulated:
        warnings.append("the target was the embedded simulator: GPU and server readings are simulated, not measured")
    short = [f"{r.level:g}" for r in rows if r.insufficient and r.requests]
    if short:
        warnings.append(f"{len(short)} step(s) have fewer than {run.settings.min_requests} measured requests "
                        f"(load.min_requests) and decide nothing: levels {', '.join(short)}")
    if workloads is not None:
        warnings += class_warnings(workloads, run.settings.min_requests)
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
        stability=stability(run.requests, run.telemetry, run.load_kind),
        # A capacity search's own account: the bracket it found and why it stopped (meta.json).
        search=run.meta.search,
        # Workload classes: each one's SLO and capacity, and which class limits the mix (null: none).
        workloads=workloads,
        # A cache probe's comparison of its arms, and its answer (analysis/cache_probe.py).
        cache_probe=probe,
        # A trace replay's windows: offered vs achieved rate, SLO per window, the first broken one.
        trace=trace,
        warnings=warnings,
        meta=_meta(run),
        checklist=checklists(rows, cap, cost, plan, run.meta, series, run.slo, run.verdict),
        outcome=outcome(rows, plan, facts, len(run.requests), run.meta),
    )
    summary.answer = plain_answer(summary)  # the one sentence every view opens with (analysis/answer.py)
    return summary


def _meta(run: RunData) -> SummaryMeta:
    meta = SummaryMeta(**{k: getattr(run.meta, k) for k in SummaryMeta.COPIED if k in run.meta.model_fields_set})
    if run.meta.target:  # never a URL password in a summary
        meta.target = redact_url(str(run.meta.target))
    meta.requests_total = len(run.requests)
    meta.results_dir = str(run.path)
    return meta
