"""A trace replay's account: per window of the trace, the traffic it offered next to what the server
completed, whether the SLO held, and the first window (moment of the traffic) where it broke.

Reads the step rows (one per window) and the scenario copy's `load` section (speed-up, window
length, start); no other input. The window's trace times are the scenario's: window i covers
trace seconds [start_s + i·window_s, start_s + (i+1)·window_s) (the last one may be shorter).

The summary's section `trace` (analysis/sections.py), which the `trace` load kind names
(`LoadKind.summary_section`); its line comes first among the verdict's reasons.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.verdict import missed_limits
from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.summary import StepSummary, Trace, TraceTurn, TraceWindow, Verdict

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData


@section("trace")
class TraceSection(AnalysisSection):
    """A `trace` replay, judged window by window: where in the traffic it broke comes first in the verdict."""

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Trace:
        # the records whole only for a replay of conversations (its turns span the steps)
        return trace_summary(rows, run.settings.load, run.slo, run.requests if run.records.has("turn") else None)

    def verdict(self, found: Trace, verdict: Verdict) -> None:
        verdict.reasons.insert(0, found.line)
        verdict.trace_first_broken_window = found.first_broken_window


def session_turns(requests: Any) -> list[TraceTurn]:
    """Per turn of the replayed conversations (records with a `turn`): successful measured requests,
    their mean prompt tokens (the history grows) and TTFT percentiles (a prefix cache shows here)."""
    if requests is None or "turn" not in requests or not requests["turn"].notna().any():
        return []
    ok = requests[requests["ok"] & ~requests["warmup"] & requests["turn"].notna()]
    out = []
    for turn, g in ok.groupby("turn"):
        ttft = [float(x) for x in g["ttft_ms"].dropna()]
        prompt = g["prompt_tokens"].dropna()
        out.append(TraceTurn(turn=int(turn), requests=len(g),
                             prompt_tokens_mean=round(float(prompt.mean()), 1) if len(prompt) else None,
                             ttft_p50_ms=quantile(ttft, 0.5), ttft_p95_ms=quantile(ttft, 0.95)))
    return out


def trace_summary(rows: list[StepSummary], load: dict[str, Any], slo: SLOConfig, requests: Any = None) -> Trace:
    """The summary's `trace` section (contracts/summary.py): the step rows as the trace's windows, the
    scenario copy's `load` section saying where in the trace each one lies."""
    speedup = float(load.get("speedup") or 1.0)
    window_s = float(load.get("window_s") or 60.0)
    start_s = float(load.get("start_s") or 0.0)
    windows: list[TraceWindow] = []
    for i, r in enumerate(rows):
        wall = r.window_s
        t0 = start_s + i * window_s
        # the last window may be cut short: its wall length × speedup is its trace length
        t1 = t0 + (min(window_s, float(wall) * speedup) if wall else window_s)
        broke = bool(r.requests) and not r.slo_pass
        windows.append(TraceWindow(
            window=i, trace_start_s=round(t0, 3), trace_end_s=round(t1, 3),
            offered_rps=r.offered_rps, achieved_rps=r.achieved_rps,
            requests=r.requests, slo_pass=None if not r.requests else bool(r.slo_pass),
            ttft_p95_ms=r.ttft_p95_ms, ttft_from_schedule_p95_ms=r.ttft_from_schedule_p95_ms,
            e2e_p95_ms=r.e2e_p95_ms, valid=r.valid,
            invalid_reasons=r.invalid_reasons or [], missed=missed_limits(r, slo) if broke else [],
        ))
    first = next((w for w in windows if w.slo_pass is False), None)
    if first is None:
        judged = sum(1 for w in windows if w.slo_pass is not None)
        line = f"trace replay at {speedup:g}×: the SLO held in every window ({judged} judged)"
    else:
        line = (f"trace replay at {speedup:g}×: the SLO first broke in window {first.window + 1} of {len(windows)} "
                f"(trace {first.trace_start_s:g}–{first.trace_end_s:g} s: {_rate(first.offered_rps)} req/s "
                f"offered, {_rate(first.achieved_rps)} completed; {'; '.join(first.missed) or 'missed'})")
        if not first.valid:
            line += " — that window is flagged: " + "; ".join(first.invalid_reasons or ["invalid"])
    return Trace(speedup=speedup, window_s=window_s, start_s=start_s, path=load.get("path"),
                 windows=windows, first_broken_window=None if first is None else first.window, line=line,
                 turns=session_turns(requests))


def _rate(v: Any) -> str:
    return "?" if v is None else f"{float(v):.3g}"
