"""A trace replay (analysis/trace_windows.py) in words: the report's "Trace replay" section — the line
that says where in the traffic the SLO first broke, a row per window, and per turn of the replayed
conversations when it had sessions (summary.md and report.html)."""

from __future__ import annotations

import html

from capacity_plugins.contracts.summary import Summary, Trace, TraceTurn, TraceWindow
from capacity_plugins.outputs.numbers import fmt, fmt_level, fmt_num
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

TRACE_COLS = [("window", "window"), ("trace s", "span"), ("offered req/s", "offered_rps"),
              ("achieved req/s", "achieved_rps"), ("requests", "requests"), ("TTFT p95 ms", "ttft_p95_ms"),
              ("TTFT p95 from schedule ms", "ttft_from_schedule_p95_ms"), ("SLO", "slo")]
TURN_HEADERS = ["turn", "requests", "prompt tokens (mean)", "TTFT p50 ms", "TTFT p95 ms"]


def trace_cell(w: TraceWindow, key: str) -> str:
    """One cell of the trace-replay table (markdown and HTML); the other keys name TraceWindow's fields."""
    if key == "window":
        return str(w.window + 1)
    if key == "span":
        return f"{fmt_level(w.trace_start_s)}–{fmt_level(w.trace_end_s)}"
    if key == "slo":
        verdict = {True: "held", False: "BROKE", None: "—"}[w.slo_pass]
        return verdict + ("" if w.valid or w.slo_pass is None else " (flagged)")
    v = getattr(w, key)
    return fmt_num(v) if key.endswith("rps") else fmt(v, 0)


def _turn_cells(t: TraceTurn) -> list[str]:
    return [str(t.turn), str(t.requests), fmt(t.prompt_tokens_mean, 0), fmt(t.ttft_p50_ms, 0), fmt(t.ttft_p95_ms, 0)]


def _trace(summary: Summary) -> Trace:
    assert summary.trace is not None  # asked only when the summary has the section
    return summary.trace


@report_section("trace")
class TraceReport(ReportSection):
    # On the page the windows come straight after the run facts: where in the traffic it broke.
    html_rank = -1

    def markdown(self, summary: Summary) -> list[str]:
        trace = _trace(summary)
        out = ["", "## Trace replay", "", f"- {trace.line}", ""]
        out += md_table([h for h, _ in TRACE_COLS], [[trace_cell(w, k) for _, k in TRACE_COLS] for w in trace.windows])
        if trace.turns:
            out += [""] + md_table(TURN_HEADERS, [_turn_cells(t) for t in trace.turns])
        return out

    def html(self, summary: Summary) -> str:
        trace = _trace(summary)
        out = (f'<h2>Trace replay</h2><p id="trace">{html.escape(trace.line)}</p>'
               + html_table([h for h, _ in TRACE_COLS], [("fail" if w.slo_pass is False else "",
                                                          [trace_cell(w, k) for _, k in TRACE_COLS])
                                                         for w in trace.windows]))
        if trace.turns:
            out += html_table(TURN_HEADERS, [("", _turn_cells(t)) for t in trace.turns], attrs=' id="turns"')
        return out
