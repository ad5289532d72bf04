"""The words and the table of the report's "Workload classes" section (summary.md and report.html).

Each class: its weight and measured share, the SLO it is judged by (with the keys that set it),
its capacity in the mix's requests/s and what limited it; then the rule that makes the mix's
capacity, and one table row per step and class.
"""

from __future__ import annotations

from typing import Any

from capacity_plugins.analysis.runfacts import LIMITS
from capacity_plugins.outputs.numbers import JUDGED_MARK, fmt_iv, fmt_level, fmt_num


def _g(v: float) -> str:
    return fmt_num(v)


def class_slo_text(slo: dict[str, Any]) -> str:
    pct = f"P{slo['attainment'] * 100:g}"
    limits = [f"{name} {pct} ≤ {slo[key]:g} ms" for key, name in LIMITS if slo.get(key) is not None]
    return ", ".join(limits + [f"errors ≤ {slo['error_rate']:.1%}"])


def _capacity_text(cap: dict[str, Any]) -> str:
    if cap.get("per_node_rps") is None:
        return f"capacity unknown ({cap.get('method')})"
    ci = cap.get("per_node_rps_ci")
    ci_s = f" [{_g(ci[0])}–{_g(ci[1])}]" if ci else ""
    how = {"never_failed": "at least: its SLO never failed",
           "fails_at_lowest_load": "its SLO fails already at the lowest load"}.get(cap["method"], cap["method"])
    lim = f", limited by {cap['limiting_slo']}" if cap.get("limiting_slo") else ""
    return f"capacity {_g(cap['per_node_rps'])} rps{ci_s} of the mix ({how}{lim})"


def workload_lines(summary: dict[str, Any]) -> list[str]:
    """One line per class, then the mix's rule and result."""
    w = summary["workloads"]
    out = []
    for k in w["classes"]:
        share = f"{k['share']:.0%} of measured requests" if k.get("share") is not None else "no measured request"
        out.append(f"{k['name']} (weight {k['weight']:g}, {share}): judged on {class_slo_text(k['slo'])}; "
                   f"{_capacity_text(k['capacity'])}")
    cap = summary["capacity"]
    if cap.get("per_node_rps") is None:
        # a class with no valid step (too few of its requests everywhere): the mix cannot be shown to hold
        why = f"class {w['limiting']} has no valid step" if w.get("limiting") else cap.get("method")
        out.append(f"Mix: {w['rule']}: unknown ({why}: its SLO cannot be shown met at any level)")
    elif w.get("limiting"):
        out.append(f"Mix: {w['rule']}: {_g(cap['per_node_rps'])} rps, limited by class {w['limiting']} "
                   f"({cap.get('limiting_slo')}); classes from first to fail: {', '.join(w['order'])}")
    else:
        out.append(f"Mix: {w['rule']}; no class missed its SLO at a valid level")
    return out


def slo_lines(summary: dict[str, Any]) -> list[str]:
    """The run facts' "SLO judged" with classes: each class's own SLO (the top level is their default)."""
    return ["SLO judged per class (the top-level slo is each class's default): "
            + "; ".join(f"{k['name']}: {class_slo_text(k['slo'])}" for k in summary["workloads"]["classes"])]


def attainment_lines(summary: dict[str, Any]) -> list[str]:
    """Per class and limit, each valid level's attainment (✓ met, ✗ missed, ? within noise)."""
    out = []
    rows = [r for r in summary["steps"] if r.get("workloads")]
    for k in summary["workloads"]["classes"]:
        name = k["name"]
        for metric, limit in (rows[0]["workloads"][name]["slo"] if rows else {}).items():
            cells = []
            for r in rows:
                c = r["workloads"][name]
                v = c["slo"].get(metric)
                if c["valid"] and v and v["attainment"] is not None:
                    cells.append(f"{fmt_level(r['level'])}: {v['attainment']:.1%} {JUDGED_MARK[v['judgement']]}")
            out.append(f"{name}: {metric[:-3].upper()} ≤ {limit['limit_ms']:g} ms, share of requests under it "
                       f"(needs ≥ {k['slo']['attainment']:.0%}): " + (", ".join(cells) or "no valid step"))
    return out


# header, class-row key, digits, interval key
COLS: list[tuple[str, str, int, str | None]] = [
    ("requests", "requests", 0, None), ("ok rps", "rps", 2, "rps_ci"), ("goodput rps", "goodput_rps", 2, None),
    ("error %", "error_rate", 2, None), ("TTFT P95", "ttft_p95_ms", 0, "ttft_p95_ci_ms"),
    ("TPOT P95", "tpot_p95_ms", 1, "tpot_p95_ci_ms"), ("E2E P95", "e2e_p95_ms", 0, "e2e_p95_ci_ms"),
]
HEADERS = ["level", "class", *[c[0] for c in COLS], "SLO"]


def table_rows(summary: dict[str, Any]) -> list[tuple[bool, list[str]]]:
    """(valid, cells) per step and class, in the order of HEADERS."""
    out = []
    for r in summary["steps"]:
        for name, c in (r.get("workloads") or {}).items():
            cells = [fmt_level(r["level"]), name]
            for _, key, _, ci_key in COLS:
                v = c.get(key)
                if key == "error_rate":
                    cells.append("–" if v is None else "0" if v == 0 else fmt_num(v * 100, 2))
                    continue
                cells.append(fmt_iv(v, c.get(ci_key) if ci_key else None))
            judged = c["slo_judgement"] if c["valid"] else "insufficient" if c["insufficient"] else "invalid"
            cells.append({"pass": "pass", "fail": "fail", "uncertain": "pass?" if c["slo_pass"] else "fail?"}
                         .get(judged, judged))
            out.append((bool(c["valid"]), cells))
    return out


def markdown(summary: dict[str, Any]) -> list[str]:
    out = ["", "## Workload classes", ""] + [f"- {line}" for line in workload_lines(summary)]
    out += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(cells) + " |" for _, cells in table_rows(summary)]
    return out
