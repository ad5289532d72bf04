"""An agentic run in sessions: the summary section `agentic` (load kind `agentic`, kinds/agentic.py).

The ordinary analysis already judges every model call as a request — TTFT, time to first output
token, TPOT, E2E against the run's SLO — and, the loop being closed with one session per user,
its capacity in users (`capacity.per_node_concurrency`) is already in concurrent sessions. This
section adds what only sessions have, per step: the sessions completed in the measured window
(their last call's `session_ms` set there), sessions per minute, the completion time's P50/P95
against the session SLO (`load.session_p95_s`), calls per session and the tool wait; and the
capacity in concurrent sessions per node and sessions per minute, beside requests/s.

Concurrent sessions per node: the lower of the per-call capacity in users and the highest valid
level whose session P95 held (no interpolation: the session P95 of a few dozen sessions is a
coarse number), divided by the replicas behind the URL.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from capacity_plugins.analysis.intervals import sessions_rate
from capacity_plugins.analysis.load import RunData
from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.contracts.summary import Agentic, AgenticStep, Capacity, StepSummary


def _limit(load: dict[str, Any]) -> float | None:
    v = load.get("session_p95_s")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _column(req: pd.DataFrame, name: str) -> pd.Series:
    return req[name] if name in req.columns else pd.Series([None] * len(req), index=req.index, dtype="float64")


class SessionRecords:
    """A step consumer (step_records.py): what each step's measured successful calls say of sessions,
    on the analysis's walk — the completion times (a session's last call carries `session_ms`), the
    calls per completed session, the tool waits and the time to first output token."""

    def __init__(self) -> None:
        self.steps: dict[int, tuple[list[float], float | None, float | None, float | None]] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        ok = records[(records["step"] >= 0) & ~records["warmup"] & records["ok"]]
        if index < 0 or not len(ok):
            return
        done = _column(ok, "session_ms").dropna()
        turns = ok.loc[done.index, "turn"].dropna() if "turn" in ok.columns else pd.Series(dtype="float64")
        waits = _column(ok, "tool_wait_ms").dropna()
        visible = _column(ok, "first_visible_ms").dropna()
        self.steps[index] = ((done / 1000.0).tolist(), float(turns.mean()) if len(turns) else None,
                             float(waits.mean()) if len(waits) else None, quantile(visible.tolist(), 0.95))


def agentic_steps(run: RunData, rows: list[StepSummary]) -> list[AgenticStep]:
    got = gathered(run, "agentic", SessionRecords)
    limit = _limit(run.settings.load)
    confidence = run.verdict.confidence
    out = []
    for r in rows:
        done, per_session, wait, visible_p95 = got.steps.get(r.step, ([], None, None, None))
        p95 = quantile(done, 0.95)
        rate = sessions_rate(r.level, done, r.window_s, confidence)
        out.append(AgenticStep(
            level=r.level, sessions_completed=len(done),
            sessions_per_min=None if rate is None else rate[0] * 60.0,
            sessions_per_min_ci=None if rate is None else [rate[1] * 60.0, rate[2] * 60.0],
            sessions_per_min_method=None if rate is None else rate[3],
            session_p50_s=quantile(done, 0.5), session_p95_s=p95,
            calls_per_session=per_session, tool_wait_mean_ms=wait,
            rps=r.rps, ttft_p95_ms=r.ttft_p95_ms, first_visible_p95_ms=visible_p95,
            session_slo_pass=None if limit is None or p95 is None else p95 <= limit,
            slo_pass=bool(r.slo_pass), valid=bool(r.valid)))
    return out


def sessions_capacity(found: Agentic, cap: Capacity) -> None:
    """Concurrent sessions per node, sessions per minute and calls/s there (module doc)."""
    replicas = cap.replicas_behind_url or 1
    valid = [s for s in found.steps if s.valid and s.sessions_completed > 0]
    if not valid:
        found.line = "agentic sessions: no valid step completed a session; capacity in sessions unknown"
        return
    by_call = cap.per_node_concurrency
    held = [s for s in valid if s.slo_pass and s.session_slo_pass is not False]
    passing = held[-1] if held else None
    # the session SLO (when set) breaks at the first valid level where it fails
    first_fail = next((s for s in valid if s.session_slo_pass is False), None)
    if first_fail is not None:
        held = [s for s in held if s.level < first_fail.level]
        passing = held[-1] if held else None
    if passing is None:
        found.line = ("agentic sessions: the SLO already fails at the lowest valid level "
                      f"({valid[0].level:g} concurrent sessions); capacity in sessions unknown")
        return
    sessions = passing.level / replicas
    limited = "session_slo" if first_fail is not None else "per_call_slo"
    if by_call is not None and by_call < sessions:
        sessions, limited = by_call, "per_call_slo"
    elif first_fail is None and all(s.slo_pass for s in valid):
        limited = "never_failed"
    found.per_node_sessions = sessions
    found.per_node_sessions_per_min = None if passing.sessions_per_min is None else passing.sessions_per_min / replicas
    if passing.sessions_per_min_ci is not None:
        found.per_node_sessions_per_min_ci = [v / replicas for v in passing.sessions_per_min_ci]
    found.per_node_rps = None if passing.rps is None else passing.rps / replicas
    found.limited_by = limited
    why = {"session_slo": f"the session P95 limit ({found.session_p95_limit_s:g} s) breaks above it"
           if found.session_p95_limit_s is not None else "the session SLO breaks above it",
           "per_call_slo": "the per-call SLO breaks above it",
           "never_failed": "no level failed: extend the levels"}[limited]
    p95 = f", session P95 {passing.session_p95_s:.3g} s" if passing.session_p95_s is not None else ""
    rps = f"{found.per_node_rps:.3g}" if found.per_node_rps is not None else "?"
    found.line = f"one node holds {sessions_words(found)}, {rps} model calls/s{p95}); {why}"


def sessions_words(found: Agentic) -> str:
    """'at least 4 concurrent agentic sessions (258 [256–261] sessions/min' — the capacity in
    sessions, for the section's line and the plain answer (analysis/answer.py)."""
    at_least = "at least " if found.limited_by == "never_failed" else ""
    per_min = "?" if found.per_node_sessions_per_min is None else f"{found.per_node_sessions_per_min:.3g}"
    if found.per_node_sessions_per_min_ci is not None:
        lo, hi = found.per_node_sessions_per_min_ci
        per_min += f" [{lo:.3g}–{hi:.3g}]" if math.isfinite(hi) else f" [{lo:.3g}–∞]"
    return f"{at_least}{found.per_node_sessions or 0:.3g} concurrent agentic sessions ({per_min} sessions/min"


@section("agentic")
class AgenticSection(AnalysisSection):
    def step_records(self, run: RunData) -> SessionRecords:
        return SessionRecords()

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Agentic:
        return Agentic(steps=agentic_steps(run, rows), session_p95_limit_s=_limit(run.settings.load))

    def capacity(self, found: Agentic, cap: Capacity, run: RunData) -> Capacity:
        sessions_capacity(found, cap)  # stated in sessions; the plan keeps requests/s
        return cap

    def warnings(self, found: Agentic, run: RunData) -> list[str]:
        short = [s.level for s in found.steps if s.valid and s.sessions_completed < 10]
        if short:
            return [f"agentic: fewer than 10 sessions completed at level(s) {', '.join(f'{v:g}' for v in short)}: "
                    "the session percentiles there are coarse (lengthen step_s)"]
        return []
