"""Whether the analysis could complete its decision, and the exit code that says so.

| exit | when |
|---|---|
| 0 | the analysis completed, whatever the verdict |
| 1 | the decision could not be completed: no requests were recorded, no valid step, the plan refused, the run itself is incomplete, or a worker was lost at an unknown time. Everything that can be written still is |
| 2 | bad input or usage, before any side effect (raised as `UserError`, not decided here) |
| 3 | a gate the user asked for failed (analysis/gate.py), when the decision itself completed |

A decision that could not be completed wins over a failed gate: "the service is slow" must not be
claimed from a run that could not show it.
"""

from __future__ import annotations

from capacity_plugins.analysis.validity import lost_without_time
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.summary import AnySummary, Outcome, Plan, RunFacts, StepSummary
from capacity_plugins.errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_RUN_FAILED

NO_REQUESTS = "no requests were recorded"


def outcome(steps: list[StepSummary], plan: Plan, run: RunFacts, records: int, meta: Meta | None = None) -> Outcome:
    """{decision_complete, reasons}: why the decision is incomplete (empty reasons: it is complete)."""
    reasons: list[str] = []
    if records == 0:
        reasons.append(NO_REQUESTS)
    elif not any(r.valid for r in steps):
        reasons.append("no valid step: every step is invalid or insufficient (the load table says why)")
    if plan.refused and records:
        reasons.append(f"plan refused: {plan.refused}")
    if run.complete is False:
        reasons.append(f"the run is incomplete ({run.incomplete_reason or 'interrupted'})")
    unplaced = lost_without_time(meta or Meta())
    if unplaced:
        reasons.append(f"{len(unplaced)} worker(s) lost at an unknown time: no step can be shown unaffected")
    return Outcome(decision_complete=not reasons, reasons=reasons)


def exit_code(summary: AnySummary, gates_failed: list[str]) -> int:
    if not summary.outcome.decision_complete:
        return EXIT_RUN_FAILED
    return EXIT_GATE_FAILED if gates_failed else EXIT_OK
