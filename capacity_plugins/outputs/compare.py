"""A comparison (analysis/compare.py) as the Markdown table `capacity compare` prints."""

from __future__ import annotations

from capacity_plugins.analysis.compare import fmt_value
from capacity_plugins.contracts.comparison import Comparison


def markdown(c: Comparison) -> str:
    head = (f"Compared at level {c.compared_level:g}: {c.compared_where}" if c.compared_level is not None
            else c.compared_where)
    nb = c.noise_basis
    lines = [head, f"Noise: before {nb.before}, after {nb.after} "
                   f"(minimum detectable difference {nb.min_detectable_difference:.0%})",
             "", "| metric | before | after | change | ± noise | verdict |", "|---|---|---|---|---|---|"]
    for r in c.rows:
        ch = "–" if r.change is None else f"{r.change:+.0%}"
        lines.append(f"| {r.metric} | {fmt_value(r.before)} | {fmt_value(r.after)} | {ch} | {fmt_value(r.noise)} | {r.verdict} |")
    lines += ["", f"Overall: {c.bottom_line}"] + [f"- {a}" for a in c.advice]
    return "\n".join(lines) + "\n"
