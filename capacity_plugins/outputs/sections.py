"""The report's sections that only some runs have, registered by name: their words in summary.md,
report.html and the terminal.

A report section is the words of the summary's section of the same name (analysis/sections.py:
`search`, `workloads`, `cache_probe`, `trace`, ...), registered in its own text module:

    @report_section("trace")
    class TraceReport(ReportSection):
        def markdown(self, summary):
            return ["", "## Trace replay", "", f"- {summary.trace.line}"]

report_text.py and report.py ask every section the summary has (its key set and not empty), in
order, and name none of them. The hooks, each empty unless the section has something to say:

| hook | where | what it returns |
|---|---|---|
| `markdown(summary)` | summary.md, after the run facts | its lines, its heading included |
| `html(summary)` | report.html, after the run facts | its block (one line of the page) |
| `headline(summary)` | the terminal's headline and the reports' details, after the capacity | its line(s) |
| `slo_lines(summary)` | the run facts' "SLO judged" | a section that judges by SLOs of its own (workload classes): its lines in place of the top-level SLO's, whose limits the plots then leave out; None: the top-level SLO judges |
| `attainment_lines(summary)` | the run facts, after the SLO | likewise, each limit's attainment per level |

Sections come in the order of `BUILTIN`, then in the order others registered; report.html orders
them by `html_rank` first (the trace replay's windows come straight after the run facts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from capacity_plugins.contracts.sections import SectionRegistry

if TYPE_CHECKING:
    from capacity_plugins.contracts.summary import Summary

# The built-in report sections, by the module that registers each, in the order summary.md shows them.
BUILTIN = ("search_text", "workloads_text", "cache_probe_text", "trace_text", "items_text", "reasoning_text",
           "images_text", "pareto_text", "agentic_text")


class ReportSection:
    """The words of one section of the summary (module doc); asked only when the summary has it."""

    name: ClassVar[str] = ""  # the summary.json key it shows (set by @report_section)
    # report.html shows the sections by rank, lowest first (equal ranks: in this registry's order).
    html_rank: ClassVar[int] = 0

    def markdown(self, summary: Summary) -> list[str]:
        return []

    def html(self, summary: Summary) -> str:
        return ""

    def headline(self, summary: Summary) -> list[str]:
        return []

    def slo_lines(self, summary: Summary) -> list[str] | None:
        return None

    def attainment_lines(self, summary: Summary) -> list[str] | None:
        return None


_SECTIONS: SectionRegistry[ReportSection] = SectionRegistry("report section", __package__ or "", BUILTIN)
R = TypeVar("R", bound=ReportSection)


def report_section(name: str) -> Callable[[type[R]], type[R]]:
    """`@report_section("trace")` on a ReportSection subclass: the reports show summary.json's `trace` with it."""
    return _SECTIONS.register(name)


def registered() -> tuple[ReportSection, ...]:
    """Every section: the built-in ones in `BUILTIN`'s order, then the others in the order they registered."""
    return _SECTIONS.registered()


def has(summary: Summary, section: ReportSection) -> bool:
    """Whether the summary has the section: its key set and not empty (an outside one's is an extra key)."""
    return bool(getattr(summary, section.name, None))


def present(summary: Summary) -> list[ReportSection]:
    return [s for s in registered() if has(summary, s)]


def markdown(summary: Summary) -> list[str]:
    return [line for s in present(summary) for line in s.markdown(summary)]


def html(summary: Summary) -> str:
    """Every section's block on a line of its own, by `html_rank` (an empty line where the run has none)."""
    ranked = sorted(registered(), key=lambda s: s.html_rank)
    return "\n".join(s.html(summary) if has(summary, s) else "" for s in ranked)


def headline(summary: Summary) -> list[str]:
    return [line for s in present(summary) for line in s.headline(summary)]


def slo_lines(summary: Summary) -> list[str] | None:
    """The run facts' "SLO judged" lines of a section that judges by SLOs of its own; None: the top-level SLO judges."""
    return next((lines for s in present(summary) if (lines := s.slo_lines(summary)) is not None), None)


def attainment_lines(summary: Summary) -> list[str] | None:
    """Each limit's attainment per level, as a section that judges by SLOs of its own says it; None: none does."""
    return next((lines for s in present(summary) if (lines := s.attainment_lines(summary)) is not None), None)
