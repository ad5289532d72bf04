"""An agentic run (analysis/agentic.py) in words: the report's "Agentic sessions" section — the
capacity in concurrent sessions per node and sessions per minute beside requests/s, and per level
the sessions completed, their completion time against the session SLO, calls per session, the
tool wait and the per-call latencies (summary.md and report.html)."""

from __future__ import annotations

import html

from capacity_plugins.contracts.summary import Agentic, AgenticStep, Summary
from capacity_plugins.outputs.numbers import fmt_iv, fmt_level, fmt_num
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

HEADERS = ["concurrent sessions", "completed", "sessions/min", "session p50 s", "session p95 s", "calls/session",
           "tool wait ms", "calls/s", "TTFT p95 ms", "first output p95 ms", "session SLO", "call SLO", "valid"]


def _yes(v: bool | None) -> str:
    return "—" if v is None else ("pass" if v else "FAIL")


def _cells(s: AgenticStep) -> list[str]:
    return [fmt_level(s.level), str(s.sessions_completed), fmt_iv(s.sessions_per_min, s.sessions_per_min_ci),
            fmt_num(s.session_p50_s),
            fmt_num(s.session_p95_s), fmt_num(s.calls_per_session), fmt_num(s.tool_wait_mean_ms), fmt_num(s.rps),
            fmt_num(s.ttft_p95_ms), fmt_num(s.first_visible_p95_ms), _yes(s.session_slo_pass), _yes(s.slo_pass),
            "yes" if s.valid else "no"]


def _agentic(summary: Summary) -> Agentic:
    assert summary.agentic is not None  # asked only when the summary has the section
    return summary.agentic


def _slo(a: Agentic) -> str:
    if a.session_p95_limit_s is None:
        return "session SLO: none set (load.session_p95_s); each model call is judged by the run's SLO"
    return (f"session SLO: completion time P95 ≤ {a.session_p95_limit_s:g} s; each model call is judged by "
            "the run's SLO (TTFT, time to first output token, …)")


@report_section("agentic")
class AgenticReport(ReportSection):
    def headline(self, summary: Summary) -> list[str]:
        return [_agentic(summary).line]

    def markdown(self, summary: Summary) -> list[str]:
        a = _agentic(summary)
        out = ["", "## Agentic sessions", "", f"- {a.line}", f"- {_slo(a)}", ""]
        return out + md_table(HEADERS, [_cells(s) for s in a.steps])

    def html(self, summary: Summary) -> str:
        a = _agentic(summary)
        return (f'<h2>Agentic sessions</h2><p id="agentic">{html.escape(a.line)}</p><p>{html.escape(_slo(a))}</p>'
                + html_table(HEADERS, [("" if s.valid else "invalid", _cells(s)) for s in a.steps],
                             attrs=' id="agentic-steps"'))
