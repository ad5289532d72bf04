"""The plain answer: one sentence a planner can repeat, stated once for every place a person looks.

The report's first line, summary.md's, the last lines of `capacity run` and `capacity analyze`,
and the LLM tab after the test all print `plain_answer(summary)` (stored as summary.json
`answer`); nothing else words the decision twice. It is built from the summary alone (capacity,
plan, verdict), so it never disagrees with the numbers below it. Settings and method stay out of
it: they are the report's details (`verdict.settings`).

What it says, case by case:

- capacity measured: "One node serves 8.51 req/s [7.87–9.17] within TTFT p95 ≤ 1.5 s"; "at least"
  when the SLO held at every level (`never_failed`: a lower bound); with workload classes, within
  each class's own SLO and which class limits the mix;
- capacity unknown (no valid step, or the SLO already failing at the lowest valid level, below
  which nothing was measured): what was not measured and what to run next — never a 0;
- the SLO failing with one request at a time (`fails_at_lowest_load`): no number of nodes meets it;
- the plan: the nodes a forecast peak needs (× safety, + spares), against the nodes you have,
  ending with the decision in capitals; no peak, a refused plan: why no fleet size;
- a trace replay leads with where in the traffic the SLO broke; an agentic run states the
  capacity in concurrent sessions and sessions per minute after the one in req/s; a prefix-cache
  probe ends with its own answer.

`answer_lines(summary)` is what a terminal prints: the answer, then `reasons_in_words(summary)`
(the verdict's reasons, then what to measure next).
"""

from __future__ import annotations

from capacity_plugins.contracts.summary import AnySummary, Capacity, Summary

LIMIT_WORDS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "itl_ms": "ITL"}
DECISION_WORDS = {"scale": "SCALE", "dont_scale_yet": "DON'T SCALE YET", "observe": "OBSERVE"}


def _rps(v: float) -> str:
    """Three significant digits, as the report prints them (8.20, 12.5, 1,234)."""
    return f"{v:#.3g}".rstrip(".") if v < 100 else f"{v:,.0f}"


def _ms(v: float) -> str:
    return f"{v / 1000:g} s" if v >= 1000 else f"{v:g} ms"


def _within(summary: AnySummary) -> str:
    """'within TTFT p95 ≤ 1.5 s and TPOT p95 ≤ 100 ms' from the SLO the run was judged by."""
    workloads = summary.workloads if isinstance(summary, Summary) else None
    if workloads:
        limiting = workloads.limiting
        return "within each workload class's own SLO" + (f" (class {limiting} limits the mix)" if limiting else "")
    slo = summary.slo
    pct = f"p{float(slo.attainment) * 100:g}"
    limits = {m: getattr(slo, f"{m[:-3]}_p95_ms") for m in LIMIT_WORDS}
    parts = [f"{LIMIT_WORDS[m]} {pct} ≤ {_ms(float(v))}" for m, v in limits.items() if v is not None]
    return "within " + " and ".join(parts) if parts else "at 70 % of its best throughput (no SLO limit set)"


def _slo_words(summary: AnySummary) -> str:
    """'TTFT p95 ≤ 1.5 s' — the SLO, without 'within'."""
    return _within(summary).removeprefix("within ")


def _unknown(cap: Capacity) -> bool:
    return cap.per_node_rps is None


def _infeasible(summary: AnySummary) -> bool:
    cap = summary.capacity
    return cap.per_node_rps == 0 and bool(summary.plan.infeasible or cap.method == "fails_at_lowest_load")


def capacity_sentence(summary: AnySummary) -> str:
    """What one node carries, with its interval, or why that is not known."""
    cap = summary.capacity
    per_node = cap.per_node_rps
    if per_node is None:
        why = cap.unknown_reason or next(iter(cap.notes), None) or "it was not measured"
        todo = f" — {cap.measure_next}" if cap.measure_next else ""
        return f"One node's capacity is unknown: {why}{todo}."
    ci = cap.per_node_rps_ci
    if per_node == 0:
        if ci and ci[1]:
            return (f"One node's capacity is 0 req/s as measured, and up to {_rps(ci[1])} req/s within the noise, "
                    f"{_within(summary)}: one request at a time already misses it as measured.")
        return f"One request at a time already misses {_slo_words(summary)}, so no number of nodes meets it."
    span = f" [{_rps(ci[0])}–{_rps(ci[1])}]" if ci else ""
    if cap.method == "never_failed":
        return (f"One node serves at least {_rps(per_node)} req/s{span} {_within(summary)} "
                "(the SLO held at every level tested).")
    if cap.method == "repeats":  # a repeat set: the mean over its repeats, the run-to-run interval
        return f"One node serves {_rps(per_node)} req/s{span} {_within(summary)} (mean of {cap.n} repeats)."
    return f"One node serves {_rps(per_node)} req/s{span} {_within(summary)}."


def plan_sentence(summary: AnySummary) -> str:
    """The fleet the forecast peak needs, in words, ending with the decision."""
    plan = summary.plan
    cap = summary.capacity
    decision = DECISION_WORDS.get(summary.verdict.decision, "OBSERVE")
    peak = plan.peak_qps
    if _infeasible(summary):
        return f"Relax the SLO or make a single request faster → {decision}."
    if peak is None:
        return f"No forecast peak given (--peak-qps), so no fleet size → {decision}."
    if plan.nodes is None:
        if _unknown(cap):
            return f"A peak of {peak:g} req/s cannot be sized without it → {decision}."
        why = plan.refused or plan.infeasible or "the capacity is not known"
        return f"A peak of {peak:g} req/s cannot be sized: {why} → {decision}."
    base = plan.nodes - (plan.redundancy or 0)
    spare = f" + {plan.redundancy} spare = {plan.nodes}" if plan.redundancy else ""
    cur = plan.current_nodes
    have = f"; you have {cur}" if cur is not None else ""
    sf = plan.safety_factor or 1
    safety = f" × {sf:g} safety" if sf != 1 else ""
    return (f"A peak of {peak:g} req/s{safety} needs {base} node{'s' if base != 1 else ''}{spare}{have} → "
            f"{decision}{_why_not_the_plan(summary)}.")


# The verdict rules (verdict.py `rule`) that decide otherwise than the node count alone suggests.
RULE_WORDS = {
    "gpu_not_the_bottleneck": "the GPU is not the bottleneck",
    "no_gpu_telemetry": "no GPU telemetry shows the GPU is the limit",
    "scale_rule_not_met": "the GPU is not shown to be the limit",
    "no_margin": "the peak fits today's capacity, without margin",
    "too_few_valid_steps": "too few valid steps to decide",
}


def _why_not_the_plan(summary: AnySummary) -> str:
    """': the GPU is not the bottleneck' when the decision is not what the plan's node count says."""
    plan, verdict = summary.plan, summary.verdict
    nodes, cur = plan.nodes, plan.current_nodes
    if verdict.decision == "scale" or nodes is None or (cur is not None and nodes <= cur):
        return ""
    words = RULE_WORDS.get(verdict.rule or "")
    return f": {words}" if words else ""


def _trace_sentence(summary: AnySummary) -> str:
    trace = summary.trace if isinstance(summary, Summary) else None
    if not trace:
        return ""
    speed = f"{trace.speedup:g}×"
    first = trace.first_broken_window
    if first is None:
        return f"Replaying the trace at {speed}, the SLO held in every window. "
    return (f"Replaying the trace at {speed}, the SLO first broke in window {first + 1} of "
            f"{len(trace.windows)}. ")


def _cache_sentence(summary: AnySummary) -> str:
    probe = summary.cache_probe if isinstance(summary, Summary) else None
    answer = (probe.answer if probe is not None else "").strip()
    if not answer:
        return ""
    return " Prefix cache: " + (answer if answer.endswith(".") else answer + ".")


def _sessions_sentence(summary: AnySummary) -> str:
    """' That is at least 4 concurrent agentic sessions (258 [256–261] sessions/min) per node.'"""
    agentic = summary.agentic if isinstance(summary, Summary) else None
    if agentic is None or agentic.per_node_sessions is None:
        return ""
    # here, not at the top: wording a summary needs only contracts/, not the analysis's pandas
    from capacity_plugins.analysis.agentic import sessions_words

    return f" That is {sessions_words(agentic)}) per node."


def _not_completed(summary: AnySummary) -> str:
    """'Decision not completed: the run is incomplete (…). ' — a refused plan says so itself."""
    said = ("plan refused", "no valid step") if summary.capacity.unknown_reason else ("plan refused",)
    reasons = [r for r in summary.outcome.reasons if not r.startswith(said)]
    return f"Decision not completed: {reasons[0]}. " if reasons else ""


def plain_answer(summary: AnySummary) -> str:
    """The one sentence (two short ones) that opens every view of a run."""
    return (f"{_not_completed(summary)}{_trace_sentence(summary)}{capacity_sentence(summary)}"
            f"{_sessions_sentence(summary)} {plan_sentence(summary)}{_cache_sentence(summary)}")


def _said(reason: str, answer: str) -> bool:
    """A reason the answer already states word for word (an unknown capacity's, a refused plan's)."""
    core = reason.removeprefix("Capacity unknown: ").removeprefix("The plan gives no fleet size: ").rstrip(".")
    return len(core) > 20 and core in answer


def _stored_answer(summary: AnySummary) -> str:
    """The answer summary.json holds (a repeat set's is worded when asked)."""
    return (summary.answer if isinstance(summary, Summary) else "") or plain_answer(summary)


def reasons_in_words(summary: AnySummary) -> list[str]:
    """The verdict's reasons, then what to measure next: plain lines, for under the answer."""
    verdict = summary.verdict
    answer = _stored_answer(summary)
    out = [f"- {r}" for r in verdict.reasons if not _said(r, answer)]
    nxt = [m for m in verdict.measure_next or [] if m and m not in answer]
    out += [f"Measure next: {m}" for m in nxt]
    return out


def answer_lines(summary: AnySummary) -> list[str]:
    """The answer and its reasons in words: what a terminal prints."""
    return [_stored_answer(summary), *(f"  {x}" for x in reasons_in_words(summary))]
