"""A capacity search's account (summary.json `search`) in words: the report's "Capacity search" section
— the bracket it found, why it stopped, and the levels it measured in order (summary.md and report.html)."""

from __future__ import annotations

import html

from capacity_plugins.contracts.summary import Summary
from capacity_plugins.outputs.numbers import fmt_level
from capacity_plugins.outputs.sections import ReportSection, report_section


def search_lines(summary: Summary) -> list[str]:
    """A capacity search's bracket and the path it took; empty for fixed sweeps."""
    s = summary.search
    if not s:
        return []
    unit = s.unit or ""
    lo, hi = s.highest_pass, s.lowest_fail
    if lo is not None and hi is not None:
        found = f"the SLO held at {fmt_level(lo)} {unit} and not (or not surely) at {fmt_level(hi)} {unit}"
    elif lo is not None:
        found = f"the SLO held at {fmt_level(lo)} {unit}, the highest level tried: capacity is at least that"
    elif hi is not None:
        found = f"no level was shown to meet the SLO (the lowest tried: {fmt_level(hi)} {unit})"
    else:
        found = "no step was judged"
    state = "converged" if s.converged else "not converged"
    path = ", ".join(f"{fmt_level(st.level)} {st.judgement}" for st in s.steps)
    return [f"Capacity search ({state}): {found}; stopped: {s.stopped}",
            f"Steps measured, in order: {path or 'none'}"]


@report_section("search")
class SearchReport(ReportSection):
    def markdown(self, summary: Summary) -> list[str]:
        return ["", "## Capacity search", ""] + [f"- {line}" for line in search_lines(summary)]

    def html(self, summary: Summary) -> str:
        return ('<h2>Capacity search</h2><ul id="search">'
                + "".join(f"<li>{html.escape(x)}</li>" for x in search_lines(summary)) + "</ul>")
