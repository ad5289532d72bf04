"""The words and the table of the report's "Workload classes" section (summary.md and report.html), and
the run facts' SLO lines with classes (each class judged by its own SLO).

Each class: its weight and measured share, the SLO it is judged by (with the keys that set it),
its capacity in the mix's requests/s and what limited it; then the rule that makes the mix's
capacity, and one table row per step and class.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from capacity_plugins.analysis.runfacts import LIMITS
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.summary import Capacity, ClassRow, Summary, Workloads
from capacity_plugins.outputs.numbers import JUDGED_MARK, fmt_iv, fmt_level, fmt_num
from capacity_plugins.outputs.sections import ReportSection, report_section


def _g(v: float) -> str:
    return fmt_num(v)


def class_slo_text(slo: SLOConfig) -> str:
    pct = f"P{slo.attainment * 100:g}"
    limits = [f"{name} {pct} ≤ {getattr(slo, key):g} ms" for key, name in LIMITS if getattr(slo, key) is not None]
    return ", ".join(limits + [f"errors ≤ {slo.error_rate:.1%}"])


def _capacity_text(cap: Capacity) -> str:
    if cap.per_node_rps is None:
        return f"capacity unknown ({cap.method})"
    ci = cap.per_node_rps_ci
    ci_s = f" [{_g(ci[0])}–{_g(ci[1])}]" if ci else ""
    how = {"never_failed": "at least: its SLO never failed",
           "fails_at_lowest_load": "its SLO fails already at the lowest load"}.get(cap.method or "", cap.method)
    lim = f", limited by {cap.limiting_slo}" if cap.limiting_slo else ""
    return f"capacity {_g(cap.per_node_rps)} rps{ci_s} of the mix ({how}{lim})"


def _workloads(summary: Summary) -> Workloads:
    assert summary.workloads is not None  # the report has this section only with classes
    return summary.workloads


def workload_lines(summary: Summary) -> list[str]:
    """One line per class, then the mix's rule and result."""
    w = _workloads(summary)
    out = []
    for k in w.classes:
        share = f"{k.share:.0%} of measured requests" if k.share is not None else "no measured request"
        model = f"model {k.model}, " if k.model else ""
        out.append(f"{k.name} ({model}weight {k.weight:g}, {share}): judged on {class_slo_text(k.slo)}; "
                   f"{_capacity_text(k.capacity)}")
    cap = summary.capacity
    if cap.per_node_rps is None:
        # a class with no valid step (too few of its requests everywhere): the mix cannot be shown to hold
        why = f"class {w.limiting} has no valid step" if w.limiting else cap.method
        out.append(f"Mix: {w.rule}: unknown ({why}: its SLO cannot be shown met at any level)")
    elif w.limiting:
        out.append(f"Mix: {w.rule}: {_g(cap.per_node_rps)} rps, limited by class {w.limiting} "
                   f"({cap.limiting_slo}); classes from first to fail: {', '.join(w.order)}")
    else:
        out.append(f"Mix: {w.rule}; no class missed its SLO at a valid level")
    return out


def slo_lines(summary: Summary) -> list[str]:
    """The run facts' "SLO judged" with classes: each class's own SLO (the top level is their default)."""
    return ["SLO judged per class (the top-level slo is each class's default): "
            + "; ".join(f"{k.name}: {class_slo_text(k.slo)}" for k in _workloads(summary).classes)]


def attainment_lines(summary: Summary) -> list[str]:
    """Per class and limit, each valid level's attainment (✓ met, ✗ missed, ? within noise)."""
    out = []
    rows = [(r, r.workloads) for r in summary.steps if r.workloads]
    for k in _workloads(summary).classes:
        name = k.name
        for metric, limit in (rows[0][1][name].slo if rows else {}).items():
            cells = []
            for r, classes in rows:
                c = classes[name]
                v = c.slo.get(metric)
                if c.valid and v and v.attainment is not None:
                    cells.append(f"{fmt_level(r.level)}: {v.attainment:.1%} {JUDGED_MARK[v.judgement]}")
            out.append(f"{name}: {metric[:-3].upper()} ≤ {limit.limit_ms:g} ms, share of requests under it "
                       f"(needs ≥ {k.slo.attainment:.0%}): " + (", ".join(cells) or "no valid step"))
    return out


# header, the class row's figure with its interval (None: none shown)
COLS: list[tuple[str, Callable[[ClassRow], tuple[float | None, list[float | None] | None]]]] = [
    ("requests", lambda c: (c.requests, None)), ("ok rps", lambda c: (c.rps, c.rps_ci)),
    ("goodput rps", lambda c: (c.goodput_rps, None)), ("error %", lambda c: (c.error_rate, None)),
    ("TTFT P95", lambda c: (c.ttft_p95_ms, c.ttft_p95_ci_ms)), ("TPOT P95", lambda c: (c.tpot_p95_ms, c.tpot_p95_ci_ms)),
    ("E2E P95", lambda c: (c.e2e_p95_ms, c.e2e_p95_ci_ms)),
]
HEADERS = ["level", "class", *[c[0] for c in COLS], "SLO"]


def table_rows(summary: Summary) -> list[tuple[bool, list[str]]]:
    """(valid, cells) per step and class, in the order of HEADERS."""
    out = []
    for r in summary.steps:
        for name, c in (r.workloads or {}).items():
            cells = [fmt_level(r.level), name]
            for head, figure in COLS:
                v, ci = figure(c)
                if head == "error %":
                    cells.append("–" if v is None else "0" if v == 0 else fmt_num(v * 100, 2))
                    continue
                cells.append(fmt_iv(v, ci))
            judged = c.slo_judgement if c.valid else "insufficient" if c.insufficient else "invalid"
            cells.append({"pass": "pass", "fail": "fail", "uncertain": "pass?" if c.slo_pass else "fail?"}
                         .get(judged, judged))
            out.append((bool(c.valid), cells))
    return out


@report_section("workloads")
class WorkloadsReport(ReportSection):
    """Each class judged by its own SLO: the run facts say the classes' SLOs, not the top level's."""

    def slo_lines(self, summary: Summary) -> list[str]:
        return slo_lines(summary)

    def attainment_lines(self, summary: Summary) -> list[str]:
        return attainment_lines(summary)

    def markdown(self, summary: Summary) -> list[str]:
        out = ["", "## Workload classes", ""] + [f"- {line}" for line in workload_lines(summary)]
        out += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        out += ["| " + " | ".join(cells) + " |" for _, cells in table_rows(summary)]
        return out

    def html(self, summary: Summary) -> str:
        """The "Workload classes" section: each class's SLO and capacity, then a row per step and class."""
        e = html.escape
        lines = "".join(f"<li>{e(x)}</li>" for x in workload_lines(summary))
        head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
        body = "".join("<tr" + ("" if valid else ' class="invalid"') + ">"
                       + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>" for valid, cells in table_rows(summary))
        return (f'<h2>Workload classes</h2><div id="workloads"><ul>{lines}</ul>'
                f"<p>Each class judged by its own SLO, per step; struck-through rows have too few of the class's "
                f"requests (load.min_requests) or an invalid step and decide nothing for it.</p>"
                f"<table><tr>{head}</tr>{body}</table></div>")
