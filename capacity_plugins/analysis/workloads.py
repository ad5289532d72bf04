"""Workload classes in the analysis: each class judged by its own SLO, per step, and the mix's capacity.

Per step and class (the measured records whose `workload` is the class): requests, throughput,
goodput, TTFT / TPOT / E2E percentiles with their intervals, and the SLO judged against the class's
own SLO by the table's rules (table.py). A class with fewer than `load.min_requests` measured
requests in a step is `insufficient` there and decides nothing, like any step; the step's own
validity (client limited, swarm changed, interrupted) holds for every class in it.

With classes the top-level `slo` only sets each class's defaults, so the step's row is judged as the
**mix**: it fails when any class fails its own SLO, its `slo` entries are the classes' (keyed
`<class>.<metric>`), and its goodput counts the requests that met their own class's SLO.

Capacity per class is the ordinary rule (capacity.py) over the steps as that class sees them: the
step's load and total throughput, the class's judgement and validity. So every class's capacity is
in the same unit — the mix's requests/s at which that class stops meeting its SLO — and the mix's
capacity is the lowest of them: the load at which *any* class first misses its SLO, with the
limiting class named. Its interval runs from the lowest low end to the lowest high end: the
smallest of values that each lie in their interval lies between those two.

Workload classes are no load kind (any load may have them): their section of the summary,
`workloads` (analysis/sections.py), applies when the scenario copy has `workloads:`. It judges the
rows before they are concluded, puts the mix's capacity in place of the top-level one, and adds the
classes' warnings.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from capacity_plugins.analysis.capacity import capacity_under_slo
from capacity_plugins.analysis.intervals import rate_ci, share_ci
from capacity_plugins.analysis.load import RunData
from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.settings import ClassSettings
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.analysis.table import judge_limits, pcts_with_ci, slo_judgement, slo_views, step_window
from capacity_plugins.analysis.validity import step_validity
from capacity_plugins.contracts.slo import LIMITS
from capacity_plugins.contracts.summary import (
    Capacity,
    ClassRow,
    StepSummary,
    WorkloadClass,
    Workloads,
)

# Percentiles a class row carries (its SLO entries have the attainment quantile with its interval).
CLASS_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


class ClassRecords:
    """A step consumer (step_records.py): each step's class rows, from the step's measured records
    grouped by their `workload`, on the analysis's walk over the steps."""

    def __init__(self, run: RunData) -> None:
        self._run = run
        self._steps = {st.index: st for st in run.steps}
        self.rows: dict[int, dict[str, ClassRow]] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        st = self._steps.get(index)
        if st is None:
            return
        run = self._run
        measured = records[(records["step"] >= 0) & ~records["warmup"] & (records["error_kind"] != "cancelled")]
        groups = {key: g for key, g in measured.groupby("workload", dropna=True)}
        window = step_window(st, measured["sent_unix"].to_numpy(float))
        empty = records.iloc[0:0]
        self.rows[index] = {c.name: _class_row(run, st, groups.get(c.name, empty), c, window, run.verdict.confidence)
                            for c in run.settings.workloads}


def add_class_rows(run: RunData, rows: list[StepSummary]) -> None:
    """Each step row gets `workloads` {class: row}; its SLO fields become the mix's (module doc)."""
    got = gathered(run, "workloads", lambda: ClassRecords(run))
    for row in rows:
        if row.step not in got.rows:  # a step without records
            got(row.step, run.records.empty())
        per = got.rows[row.step]
        row.workloads = per
        _judge_mix(row, per)


def _class_row(run: RunData, st: Any, g: pd.DataFrame, c: ClassSettings, window: float | None,
               conf: float) -> ClassRow:
    ok = g[g["ok"]]
    n, n_ok = len(g), len(ok)
    slo = c.slo
    error_rate = (n - n_ok) / n if n else None
    lo, hi, how = rate_ci(ok["sent_unix"].to_numpy(float), st.warmup_end_unix or st.start_unix, window, n_ok, conf)
    pcts: dict[str, Any] = {}
    for m in CLASS_METRICS:
        pcts.update(pcts_with_ci(ok[m].to_numpy(float), m[:-3], conf))
    views = slo_views(st, lambda name: ok[name].to_numpy(float))
    limits = {metric: getattr(slo, field) for metric, field in LIMITS}
    judged, good = judge_limits(views, limits, n_ok, slo.attainment, conf)
    n_good = int(good.sum())
    err_ok = error_rate is not None and error_rate <= slo.error_rate
    validity = step_validity(st, requests=n, ok_requests=n_ok, window_s=window, settings=run.settings, meta=run.meta)
    out = ClassRow(
        requests=n, ok_requests=n_ok, errors=n - n_ok, error_rate=error_rate,
        error_rate_ci=list(share_ci(n - n_ok, n, conf)) if n else None,
        rps=n_ok / window if window else None,
        # what this class is judged against (its own SLO, its defaults from the top level)
        attainment_target=slo.attainment, error_rate_limit=slo.error_rate,
        rps_ci=None if how is None else [lo, hi],
        **pcts,
        slo=judged, good_requests=n_good, goodput_rps=n_good / window if window else None,
        slo_attainment=n_good / n if n else None,
        slo_pass=bool(n_ok > 0 and err_ok and all(v.passed for v in judged.values())),
        insufficient=validity.insufficient, valid=validity.valid, invalid_reasons=validity.invalid_reasons,
    )
    out.slo_judgement = slo_judgement(out, slo)
    return out


def _judge_mix(row: StepSummary, per: dict[str, ClassRow]) -> None:
    """The step as the mix: every class by its own SLO (a class with no request there shows nothing)."""
    seen = {name: c for name, c in per.items() if c.requests}
    row.slo = {f"{name}.{metric}": v for name, c in seen.items() for metric, v in c.slo.items()}
    row.slo_pass = bool(seen) and all(c.slo_pass for c in seen.values())
    # A class with no request in the step fails nothing (it has no judgement of its own, only "no
    # successful request"), but it cannot show it passes either: the step is uncertain.
    judged = [c.slo_judgement for c in seen.values()]
    if "fail" in judged:
        row.slo_judgement = "fail"
    elif len(seen) < len(per) or any(j != "pass" for j in judged) or any(c.insufficient for c in per.values()):
        row.slo_judgement = "uncertain"  # a class too thin to show it passes: the mix cannot either
    else:
        row.slo_judgement = "pass"
    n_good = sum(c.good_requests for c in per.values())
    window = row.window_s
    row.good_requests = n_good
    row.goodput_rps = n_good / window if window else None
    row.slo_attainment = n_good / row.requests if row.requests else None


def _class_view(row: StepSummary, c: ClassRow) -> StepSummary:
    """The step as one class sees it: the step's load and throughput, the class's judgement."""
    return row.model_copy(update={"slo": c.slo, "slo_pass": c.slo_pass, "ok_requests": c.ok_requests,
                                  "error_rate": c.error_rate, "valid": c.valid, "invalid_reasons": c.invalid_reasons})


def _classes_of(row: StepSummary) -> dict[str, ClassRow]:
    assert row.workloads is not None  # add_class_rows ran: every row has its classes
    return row.workloads


@section("workloads")
class WorkloadsSection(AnalysisSection):
    """Workload classes: not a load kind but the scenario's `workloads:`, so any load may have them."""

    def applies(self, run: RunData) -> bool:
        return bool(run.settings.workloads)

    def step_records(self, run: RunData) -> ClassRecords:
        return ClassRecords(run)

    def rows(self, run: RunData, rows: list[StepSummary]) -> None:
        add_class_rows(run, rows)  # each class judged by its own SLO; the step's SLO fields become the mix's

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Workloads:
        return workloads_section(rows, run, sweep)

    def capacity(self, found: Workloads, cap: Capacity, run: RunData) -> Capacity:
        # With classes the top-level SLO only sets defaults: plan and verdict use the mix's capacity.
        return mix_capacity(found)

    def warnings(self, found: Workloads, run: RunData) -> list[str]:
        return class_warnings(found, run.settings.min_requests)


def workloads_section(rows: list[StepSummary], run: RunData, sweep_kind: str) -> Workloads:
    """The summary's `workloads` section: each class's SLO and capacity, and the class that limits the mix."""
    cap = run.capacity
    classes = []
    for c in run.settings.workloads:
        mine = [_classes_of(r)[c.name] for r in rows]
        own = capacity_under_slo([_class_view(r, k) for r, k in zip(rows, mine, strict=True)], c.slo, cap, sweep_kind,
                                 run.verdict.confidence)
        classes.append(WorkloadClass(name=c.name, weight=c.weight, slo=c.slo.model_copy(),
                                     requests=sum(k.requests for k in mine),
                                     insufficient_levels=[r.level for r, k in zip(rows, mine, strict=True)
                                                          if k.insufficient and k.requests],
                                     capacity=own))
        if c.model is not None:
            classes[-1].model = c.model  # set only then: a sometimes-key of summary.json
    total = sum(k.requests for k in classes)
    for k in classes:
        k.share = k.requests / total if total else None
    order = sorted((k for k in classes if k.capacity.per_node_rps is not None),
                   key=lambda k: k.capacity.per_node_rps or 0.0)
    return Workloads(
        classes=classes,
        limiting=_lowest(classes).limiting_workload,
        order=[k.name for k in order],  # lowest capacity first: the class that fails first
        rule="the mix's capacity is the load at which any class first misses its own SLO",
    )


def mix_capacity(section: Workloads) -> Capacity:
    """The mix's capacity, the one the plan and the verdict use: see the module doc."""
    return _lowest(section.classes)


def _lowest(classes: list[WorkloadClass]) -> Capacity:
    unknown = [k.name for k in classes if k.capacity.per_node_rps is None]
    if unknown:
        # A class with no valid step cannot be shown to meet its SLO anywhere: neither can the mix.
        first = next(k for k in classes if k.name == unknown[0])
        out = first.capacity.model_copy(deep=True)
        why = out.unknown_reason or "no valid step"
        if out.unknown_reason:
            out.unknown_reason = f"class {unknown[0]}: {why}"
        out.limiting_workload = unknown[0]
        out.notes = [f"class {', '.join(unknown)}: {why}, so the mix's capacity is unknown"] + list(out.notes)
        return out
    low = min(classes, key=lambda k: k.capacity.per_node_rps or 0.0)
    out = low.capacity.model_copy(deep=True)
    # The mix's interval ends where any class's does: a class short of requests shortens it too.
    shown = [k.capacity.requests_to_show for k in classes if k.capacity.requests_to_show]
    if shown:
        out.requests_to_show = max(shown)
    # A class limits the mix only when its SLO failed somewhere; when none did, the mix held throughout.
    missed = out.method in ("interpolated", "fails_at_lowest_load")
    out.limiting_workload = low.name if missed else None
    rps_ends = [_ends(k.capacity.per_node_rps_ci, k.capacity.per_node_rps) for k in classes]
    if out.per_node_rps_ci is not None and all(e is not None for e in rps_ends):
        out.per_node_rps_ci = [min(e[0] for e in rps_ends if e), min(e[1] for e in rps_ends if e)]
    conc_ends = [_ends(k.capacity.per_node_concurrency_ci, k.capacity.per_node_concurrency) for k in classes]
    if out.per_node_concurrency_ci is not None and all(e is not None for e in conc_ends):
        out.per_node_concurrency_ci = [min(e[0] for e in conc_ends if e), min(e[1] for e in conc_ends if e)]
    point, ci = out.per_node_rps, out.per_node_rps_ci
    if point and ci and ci[0] is not None and ci[1] is not None:
        out.relative_interval = (ci[1] - ci[0]) / point
    if missed:
        why = (f"class {low.name} misses its own SLO first ({low.capacity.limiting_slo}): "
               "the mix's capacity is that class's")
    else:
        why = "no class missed its own SLO at a valid level: the mix's capacity is at least this"
    out.notes = [why] + [f"{low.name}: {n}" for n in out.notes]
    return out


def _ends(ci: list[float] | None, point: float | None) -> list[float] | None:
    """A class capacity's interval; its point when it has none (a point is its own interval)."""
    if ci is not None:
        return [float(ci[0]), float(ci[1])]
    return None if point is None else [float(point), float(point)]


def class_warnings(section: Workloads, min_requests: int) -> list[str]:
    out = []
    for k in section.classes:
        if k.insufficient_levels:
            levels = ", ".join(f"{v:g}" for v in k.insufficient_levels)
            out.append(f"class {k.name} has fewer than {min_requests} measured requests (load.min_requests) at "
                       f"level(s) {levels}: it decides nothing there")
        if not k.requests:
            out.append(f"class {k.name}: no measured request in any step (its weight is {k.weight:g})")
    return out
