"""The comparison: one row per entry from its summary.json, the ranking, and the best configuration.

Each row reads only the entry's analysis (its `Summary`, contracts/summary.py): capacity per node under the SLO with its
interval, the knee, TTFT / TPOT P95 at the SLO load — the valid step the capacity was last shown
to pass at (`capacity.last_pass_level`) — and the cost per 1M output tokens (GPUs × GPU-hour
price ÷ output tokens per hour at the capacity; analysis/plan.py `make_cost`).

The ranking is by capacity per cost: requests per USD = capacity (rps) × 3600 ÷ (GPUs × GPU-hour
price), when every ranked entry has a price; otherwise capacity per GPU (and a warning names the
entries without one). Equal scores go to the lower TTFT P95 at the SLO load. The winner is
**separable** from the runner-up only when the low end of its score interval is above the high
end of the runner-up's — and of every other entry's: a `never_failed` capacity is a lower bound
whose interval has no high end, so even a lower-ranked one may be the better configuration.
Those are within-run intervals: a lead smaller than `verdict.min_detectable_difference` (10 %)
is also flagged, since a second run of the same server may differ by that much (as in
`capacity compare`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from capacity_plugins.contracts.summary import AnySummary, StepSummary, Summary

REL_TIE = 1e-9
MDD = 0.10  # verdict.min_detectable_difference's default: how much a second run of one server may differ
PER_USD = "requests per USD"
PER_GPU = "rps per GPU"


def _slo_step(summary: AnySummary) -> StepSummary | None:
    level = summary.capacity.last_pass_level
    if level is None or not isinstance(summary, Summary):
        return None
    return next((r for r in summary.steps if r.level == level and r.valid), None)


def row_from_summary(summary: AnySummary) -> dict[str, Any]:
    """The matrix columns of one analysed run."""
    cap = summary.capacity
    knee = summary.knee if isinstance(summary, Summary) else None
    cost = summary.cost if isinstance(summary, Summary) else None
    step = _slo_step(summary)
    rps = cap.per_node_rps
    ci: list[float | None] | None = list(cap.per_node_rps_ci) if cap.per_node_rps_ci is not None else None
    lower_bound = cap.method == "never_failed"
    if ci is not None and lower_bound:
        ci = [ci[0], None]  # the sweep never reached the SLO's limit: no upper end is known
    per_1m = cost.per_1m_output_tokens_usd if cost is not None else None
    per_1m_ci = None
    if per_1m is not None and rps and ci is not None:
        # cost ∝ 1 / capacity: the interval's ends swap; an unknown or zero end stays unknown
        per_1m_ci = [per_1m * rps / ci[1] if ci[1] else None, per_1m * rps / ci[0] if ci[0] else None]
    return {
        "capacity_rps": rps, "capacity_ci_rps": ci, "capacity_method": cap.method,
        "capacity_is_lower_bound": lower_bound, "limiting_slo": cap.limiting_slo,
        "knee": knee.value if knee else None, "knee_unit": knee.unit if knee else None,
        "knee_interval": knee.interval if knee else None, "knee_confidence": knee.confidence if knee else None,
        "slo_load_level": step.level if step else None,
        "ttft_p95_ms": step.ttft_p95_ms if step else None, "ttft_p95_ci_ms": step.ttft_p95_ci_ms if step else None,
        "tpot_p95_ms": step.tpot_p95_ms if step else None, "tpot_p95_ci_ms": step.tpot_p95_ci_ms if step else None,
        "cost_per_1m_output_tokens_usd": per_1m, "cost_per_1m_output_tokens_ci_usd": per_1m_ci,
        "verdict": summary.verdict.decision,
        "min_detectable_difference": summary.verdict_settings.min_detectable_difference,
    }


def _scale(row: dict[str, Any], basis: str) -> float:
    gpus = row["gpus"]
    return 3600.0 / (gpus * row["gpu_hour_usd"]) if basis == PER_USD else 1.0 / gpus


def _better(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Sort key as a comparison: higher score first; equal scores, lower TTFT P95 first."""
    sa, sb = a["score"], b["score"]
    if abs(sa - sb) > REL_TIE * max(abs(sa), abs(sb), 1e-300):
        return -1 if sa > sb else 1
    ta, tb = a.get("ttft_p95_ms"), b.get("ttft_p95_ms")
    ta = math.inf if ta is None else ta
    tb = math.inf if tb is None else tb
    return (ta > tb) - (ta < tb)


def fmt(v: float | None) -> str:
    """3 significant digits, thousands without an exponent (43,200 requests per USD)."""
    if v is None or not math.isfinite(v):
        return "∞"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def rank(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Score and rank the rows that completed (in place: `score`, `score_ci`, `rank`); the best one, why."""
    ok = [r for r in rows if r["status"] == "ok" and r.get("capacity_rps") is not None]
    unpriced = [r["name"] for r in ok if not r.get("gpu_hour_usd")]
    basis = PER_GPU if unpriced or not ok else PER_USD
    warnings = []
    if unpriced and len(unpriced) < len(ok):
        warnings.append(f"no gpu_hour_usd for {', '.join(unpriced)}: ranked by capacity per GPU, not per cost")
    for r in ok:
        k = _scale(r, basis)
        r["score"] = r["capacity_rps"] * k
        ci = r.get("capacity_ci_rps")
        r["score_ci"] = None if ci is None else [None if x is None else x * k for x in ci]
    ordered = sorted(ok, key=functools.cmp_to_key(_better))
    for i, r in enumerate(ordered, 1):
        r["rank"] = i
    best: dict[str, Any] = {"basis": basis, "name": None, "runner_up": None, "separable": None,
                            "not_separable_from": [], "within_run_to_run_noise": None, "tie_broken_by_ttft": False, "statement": None,
                            "warnings": warnings}
    if not ordered:
        best["statement"] = "no entry completed with a decision: no best configuration"
        return best
    win = ordered[0]
    if win["score"] <= 0:
        best["statement"] = "no configuration met the SLO at the lowest load it was tested at: no best configuration"
        return best
    best["name"] = win["name"]
    head = f"{win['name']}: {fmt(win['score'])} {basis}"
    if win["capacity_is_lower_bound"]:
        head += " (a lower bound: its sweep never reached the SLO's limit)"
    if len(ordered) == 1:
        best["statement"] = f"{head} — the only configuration with a decision"
        return best
    second = ordered[1]
    best["runner_up"] = second["name"]
    tie = _better(win, second) != 0 and abs(win["score"] - second["score"]) <= REL_TIE * abs(win["score"])
    best["tie_broken_by_ttft"] = tie
    wci, sci = win.get("score_ci"), second.get("score_ci")
    # Every other entry, not only the runner-up: a lower-ranked one whose interval has no upper end
    # (a lower-bound capacity) may still be the better configuration.
    overlapping = [r for r in ordered[1:] if not _above(wci, r.get("score_ci"))]
    separable = not overlapping
    best["separable"] = separable
    best["not_separable_from"] = [r["name"] for r in overlapping]
    text = f"{head}, ahead of {second['name']} ({fmt(second['score'])})"
    if tie:
        text += (f"; tied on {basis}, it has the lower TTFT P95 at the SLO load "
                 f"({fmt(win.get('ttft_p95_ms'))} vs {fmt(second.get('ttft_p95_ms'))} ms)")
    gap = win["score"] / second["score"] - 1 if second["score"] else math.inf
    mdd = win.get("min_detectable_difference", MDD)
    best["within_run_to_run_noise"] = gap < mdd
    if separable:
        text += f": their intervals do not overlap ({_ci(wci)} vs {_ci(sci)})"
        if gap < mdd:
            text += (f" — but it leads by {gap:.0%}, less than the {mdd:.0%} two runs of one server may differ by "
                     "(verdict.min_detectable_difference): repeat the runs to be sure")
    else:
        which = "it" if [r["name"] for r in overlapping] == [second["name"]] else ", ".join(
            r["name"] for r in overlapping)
        text += (f", but not separable from {which}: the intervals overlap ({win['name']} {_ci(wci)}; "
                 + "; ".join(f"{r['name']} {_ci(r.get('score_ci'))}" for r in overlapping)
                 + ") — measure more requests per step, or repeat the runs")
        bounded = [r["name"] for r in overlapping if r.get("capacity_is_lower_bound")]
        if bounded:
            text += f"; extend the sweep of {', '.join(bounded)} (its capacity is only a lower bound)"
    best["statement"] = text
    return best


def _above(a: list[float | None] | None, b: list[float | None] | None) -> bool:
    """Interval a lies wholly above interval b (an unknown end never does)."""
    return bool(a and b and a[0] is not None and b[1] is not None and a[0] > b[1])


def _ci(ci: list[float | None] | None) -> str:
    if not ci:
        return "no interval"
    return f"{fmt(ci[0])}–{fmt(ci[1])}"
