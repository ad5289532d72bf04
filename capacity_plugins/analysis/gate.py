"""The CI gates: `--fail-on-slo` and `--fail-on-verdict`, one rule for `capacity run` and `capacity analyze`.

Each failed gate is one line; a caller that asked for a gate exits 3 when any line comes back
(unless the decision itself could not be completed: analysis/outcome.py, exit 1). A repeat set's
summary gates the same way: its capacity is the repeats' mean, and without a forecast peak the SLO
gate fails when any repeat missed the SLO at a valid level.
"""

from __future__ import annotations

from capacity_plugins.contracts.summary import AnySummary, RepeatSetSummary


def gate(summary: AnySummary, fail_on_slo: bool, fail_on_verdict: str | None) -> list[str]:
    """The gates that failed (empty: all passed or none asked for)."""
    failed: list[str] = []
    if fail_on_slo:
        cap, plan = summary.capacity, summary.plan
        if plan.peak_qps is not None and cap.per_node_rps is None:
            # unknown is not zero: the SLO cannot be shown to hold, and no capacity is claimed
            failed.append(f"SLO gate: capacity under the SLO unknown ({cap.unknown_reason or cap.method}): "
                          f"the fleet cannot be shown to carry the peak {plan.peak_qps:g} qps")
        elif plan.peak_qps is not None:
            fleet = (cap.per_node_rps or 0.0) * (plan.current_nodes or 1)
            if fleet < plan.peak_qps:
                failed.append(f"SLO gate: capacity {fleet:.3g} rps under the SLO < peak {plan.peak_qps:g} qps")
        elif isinstance(summary, RepeatSetSummary):
            missed = sorted({lv for r in summary.repeats for lv in r.slo_missed_levels})
            if missed or not any(r.valid_steps for r in summary.repeats):
                failed.append(f"SLO gate: SLO missed at level(s) {missed}" if missed else "SLO gate: no valid step")
        else:
            missed = [r.level for r in summary.steps if r.valid and not r.slo_pass]
            if missed or not any(r.valid for r in summary.steps):
                failed.append(f"SLO gate: SLO missed at level(s) {missed}" if missed else "SLO gate: no valid step")
    if fail_on_verdict and summary.verdict.decision == fail_on_verdict:
        failed.append(f"verdict gate: verdict is {fail_on_verdict}")
    return failed
