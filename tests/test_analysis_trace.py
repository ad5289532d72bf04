"""The analysis of a trace replay from step rows alone: per-window rates, and the first window
where the SLO broke, with what flagged it."""

from __future__ import annotations

from types import SimpleNamespace

from capacity_plugins.analysis import sections
from capacity_plugins.analysis.trace_windows import trace_summary
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.summary import SloLimit, StepSummary


def _row(offered: float, achieved: float, ok: bool, valid: bool = True, ttft: float = 100.0) -> StepSummary:
    slo = {"ttft_ms": SloLimit(passed=ok, quantile_ms=ttft, limit_ms=1000.0)}
    return StepSummary(window_s=10.0, offered_rps=offered, achieved_rps=achieved, requests=50, slo_pass=ok,
                       slo=slo, ok_requests=50, error_rate=0.0, ttft_p95_ms=ttft, valid=valid,
                       invalid_reasons=[] if valid else ["client limited: sends behind schedule"])


LOAD = {"kind": "trace", "speedup": 3, "window_s": 30, "start_s": 30, "path": "t.jsonl"}


def test_first_broken_window_is_named_with_its_trace_time():
    t = trace_summary([_row(4.6, 4.4, True), _row(19, 9.8, False, valid=False, ttft=7000.0), _row(4.7, 4.4, False)],
                      LOAD, SLOConfig(ttft_p95_ms=1000))
    assert t is not None
    assert [(w.trace_start_s, w.trace_end_s) for w in t.windows] == [(30, 60), (60, 90), (90, 120)]
    assert t.first_broken_window == 1
    assert t.line.startswith("trace replay at 3×: the SLO first broke in window 2 of 3 (trace 60–90 s: "
                                "19 req/s offered, 9.8 completed;")
    assert "that window is flagged: client limited" in t.line


def test_held_everywhere_and_not_a_trace():
    t = trace_summary([_row(2, 2, True), _row(0, 0, False).model_copy(update={"requests": 0})], {**LOAD, "speedup": 1},
                      SLOConfig(ttft_p95_ms=1000))
    assert t is not None and t.first_broken_window is None
    assert t.windows[1].slo_pass is None  # an empty window is not judged
    assert t.line == "trace replay at 1×: the SLO held in every window (1 judged)"
    # only a run whose load kind names the section has it (kinds/trace.py `summary_section`)
    trace = next(s for s in sections.registered() if s.name == "trace")
    assert trace.applies(SimpleNamespace(load_kind="trace"))
    assert not trace.applies(SimpleNamespace(load_kind="rate_sweep")) and not trace.applies(SimpleNamespace(load_kind=None))
