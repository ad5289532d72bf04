"""The plain answer: one sentence a planner can repeat, stated once for every place a person looks.

The report's first line, summary.md's, the last lines of `capacity run` and `capacity analyze`,
and the LLM tab after the test all print `plain_answer(summary)`; nothing else words the decision
twice. It is built from the summary alone (capacity, plan, verdict), so it never disagrees with
the numbers below it. Settings and method stay out of it: they are the report's details.
"""

from __future__ import annotations

from typing import Any

LIMIT_WORDS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "itl_ms": "ITL"}
DECISION_WORDS = {"scale": "SCALE", "dont_scale_yet": "DON'T SCALE YET", "observe": "OBSERVE"}


def _rps(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def _ms(v: float) -> str:
    return f"{v / 1000:g} s" if v >= 1000 else f"{v:g} ms"


def _within(summary: dict[str, Any]) -> str:
    """'within TTFT p95 ≤ 1.5 s and TPOT p95 ≤ 100 ms' from the SLO the run was judged by."""
    slo = summary.get("slo") or {}
    pct = f"p{float(slo.get('attainment', 0.95)) * 100:g}"
    parts = [f"{LIMIT_WORDS[m]} {pct} ≤ {_ms(float(slo[f'{m[:-3]}_p95_ms']))}"
             for m in LIMIT_WORDS if slo.get(f"{m[:-3]}_p95_ms") is not None]
    return "within " + " and ".join(parts) if parts else "at 70 % of its best throughput (no SLO limit set)"


def capacity_sentence(summary: dict[str, Any]) -> str:
    """What one node carries, with its interval, or why that is not known."""
    cap = summary.get("capacity") or {}
    per_node = cap.get("per_node_rps")
    if per_node is None:
        reason = (cap.get("notes") or ["capacity under the SLO unknown"])[0]
        return f"Capacity of one node not measured: {reason}."
    ci = cap.get("per_node_rps_ci")
    span = f" [{_rps(ci[0])}–{_rps(ci[1])}]" if ci else ""
    at_least = "at least " if cap.get("method") == "never_failed" else ""
    return f"One node serves {at_least}{_rps(per_node)} req/s{span} {_within(summary)}."


def plan_sentence(summary: dict[str, Any]) -> str:
    """The fleet the forecast peak needs, in words, ending with the decision."""
    plan = summary.get("plan") or {}
    decision = DECISION_WORDS.get((summary.get("verdict") or {}).get("decision", ""), "OBSERVE")
    peak = plan.get("peak_qps")
    if peak is None:
        return f"No forecast peak given (--peak-qps) → {decision}."
    if plan.get("nodes") is None:
        why = plan.get("infeasible") or plan.get("refused") or "the capacity is not known"
        return f"A peak of {peak:g} req/s cannot be sized: {why} → {decision}."
    base = plan["nodes"] - (plan.get("redundancy") or 0)
    spare = f" + {plan['redundancy']} spare = {plan['nodes']}" if plan.get("redundancy") else ""
    cur = plan.get("current_nodes")
    have = f"; you have {cur}" if cur is not None else ""
    sf = plan.get("safety_factor") or 1
    safety = f" × {sf:g} safety" if sf != 1 else ""
    return f"A peak of {peak:g} req/s{safety} needs {base} node{'s' if base != 1 else ''}{spare}{have} → {decision}."


def plain_answer(summary: dict[str, Any]) -> str:
    """The one sentence (two short ones) that opens every view of a run."""
    return f"{capacity_sentence(summary)} {plan_sentence(summary)}"
