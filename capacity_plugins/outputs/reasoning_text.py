"""Reasoning answers (analysis/reasoning.py) in words: the report's "Thinking" section — how much of
each answer was thinking per level, the time to first output token next to TTFT, and what a
visible token costs (summary.md and report.html)."""

from __future__ import annotations

import html

from capacity_plugins.contracts.reasoning import Reasoning, ReasoningStep
from capacity_plugins.contracts.summary import Summary
from capacity_plugins.outputs.numbers import fmt_iv, fmt_level, fmt_num
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

HEADERS = ["load level", "answers", "thinking share", "reasoning tokens", "visible tokens", "TTFT p50 ms",
           "thinking p50 ms", "first output p95 ms", "visible TPOT p95 ms", "visible tok/s"]


def _cells(s: ReasoningStep) -> list[str]:
    share = fmt_iv(s.thinking_share * 100, [c * 100 if c is not None else None for c in s.thinking_share_ci or []]
                   or None, "%") if s.thinking_share is not None else "—"
    return [fmt_level(s.level), f"{s.reasoning_requests}/{s.requests}", share,
            fmt_num(s.reasoning_tokens_mean), fmt_num(s.visible_output_tokens_mean), fmt_num(s.ttft_p50_ms),
            fmt_iv(s.thinking_p50_ms, s.thinking_p50_ci_ms), fmt_iv(s.first_visible_p95_ms, s.first_visible_p95_ci_ms),
            fmt_num(s.tpot_visible_p95_ms), fmt_num(s.visible_output_tokens_per_s)]


def _details(r: Reasoning) -> list[str]:
    sources = ", ".join(f"{k}: {v}" for k, v in sorted(r.sources.items())) or "none"
    out = [f"reasoning tokens counted from: {sources} (usage = the server's count; channel = reasoning chunks, "
           "one token each)"]
    if r.per_1m_visible_tokens_usd is not None:
        out.append(f"cost per 1M visible output tokens: ${r.per_1m_visible_tokens_usd:.4g} ({r.cost_basis}; "
                   "the reasoning tokens are paid for, not shown)")
    elif r.cost_basis:
        out.append(f"cost per visible token: not priced ({r.cost_basis})")
    return out


def _reasoning(summary: Summary) -> Reasoning:
    assert summary.reasoning is not None  # asked only when the summary has the section
    return summary.reasoning


@report_section("reasoning")
class ReasoningReport(ReportSection):
    def markdown(self, summary: Summary) -> list[str]:
        r = _reasoning(summary)
        out = ["", "## Thinking (reasoning answers)", "", f"- {r.line}", *(f"- {d}" for d in _details(r)), ""]
        return out + md_table(HEADERS, [_cells(s) for s in r.steps])

    def html(self, summary: Summary) -> str:
        r = _reasoning(summary)
        items = "".join(f"<li>{html.escape(d)}</li>" for d in _details(r))
        return (f'<h2>Thinking (reasoning answers)</h2><p id="reasoning">{html.escape(r.line)}</p><ul>{items}</ul>'
                + html_table(HEADERS, [("", _cells(s)) for s in r.steps], attrs=' id="reasoning-steps"'))

    def headline(self, summary: Summary) -> list[str]:
        return [f"thinking: {_reasoning(summary).line}"]
