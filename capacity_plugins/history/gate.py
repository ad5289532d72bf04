"""`capacity gate`: is the candidate not worse than the baseline beyond a margin? Non-inferiority
judged with the noise model of `capacity compare`, not a statistic of its own.

The figures judged are capacity per node under the SLO and the SLO latencies at the compared level
(TTFT P95, E2E P99: the highest level both measured validly below saturation, analysis/compare.py).
For each, `compare()` gives the baseline, the candidate and the noise the change had to beat (both
sides' interval half-widths combined; plus the minimum detectable difference unless both sides are
repeat sets, whose run-to-run spread is measured). The change's interval is the change ± that
noise, over the baseline value — the one `capacity compare` prints. With the loss (a fall of
capacity, a rise of a latency) and the margin M, as shares of the baseline:

- not worse (exit 0): the interval's worst loss is within M;
- worse (exit 3): even its smallest loss exceeds M;
- cannot decide (exit 2): the interval straddles M. The noise of a repeat set shrinks with
  √repeats, so the repeats per side that would put the interval on one side of M are
  ⌈n · (noise / |M − loss|)²⌉; single runs carry the 10 % allowance that only repeat sets replace.

Any figure worse → worse; else any undecided → cannot decide; else not worse.
"""

from __future__ import annotations

import math

from capacity_plugins.analysis.compare import change_interval, compare, pct
from capacity_plugins.contracts.comparison import CompareRow
from capacity_plugins.contracts.history import GateCheck, GateDecision, GateResult
from capacity_plugins.contracts.summary import AnySummary, RepeatSetSummary
from capacity_plugins.errors import EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK

DEFAULT_MARGIN = 0.10
# compare()'s rows the gate judges, with the name it says them by
GATED = (("capacity per node under SLO (rps)", "capacity"), ("TTFT P95 ms", "TTFT P95"), ("E2E P99 ms", "E2E P99"))
EXIT = {"not worse": EXIT_OK, "worse": EXIT_GATE_FAILED, "cannot decide": EXIT_BAD_INPUT}


def _repeats(s: AnySummary) -> int:
    return len(s.repeats) if isinstance(s, RepeatSetSummary) else 1


def _check(row: CompareRow, name: str, margin: float, repeats: int, both_sets: bool, level: float | None) -> GateCheck:
    hib = row.metric.startswith("capacity")
    where = f" at level {level:g}" if not hib and level is not None else ""
    check = GateCheck(metric=row.metric, higher_is_better=hib, baseline=row.before, candidate=row.after,
                      change=row.change)
    if row.before is None or row.after is None or not row.before or row.noise is None or not math.isfinite(row.noise):
        side = "baseline" if row.before is None else "candidate" if row.after is None else "either side's noise"
        check.text = f"{name}{where}: not measured on the {side}" if row.before is None or row.after is None \
            else f"{name}{where}: {side} unknown"
        if level is None and not hib:
            check.text = f"{name}: no level both measured validly below saturation"
        return check
    change = row.after / row.before - 1
    noise = row.noise / abs(row.before)
    loss = -change if hib else change
    ci = change_interval(row.before, row.after, row.noise) or [change - noise, change + noise]
    check.change_ci, check.loss_upper = ci, loss + noise
    said = f"{name}{where} {pct(change)} % [{pct(ci[0])}, {pct(ci[1])}]"
    if loss + noise <= margin:
        check.decision, check.text = "not worse", f"{said}: not worse than the {margin:.0%} margin"
    elif loss - noise > margin:
        check.decision, check.text = "worse", f"{said}: worse beyond the {margin:.0%} margin"
    else:
        gap = abs(margin - loss)
        if both_sets and gap > 0:
            check.repeats_needed = math.ceil(repeats * (noise / gap) ** 2 - 1e-9)  # 12.000000000000002 is 12
            more = f"about {check.repeats_needed} repeats per side would decide (the interval shrinks with √repeats)"
        elif gap > 0:
            check.repeats_needed = 3
            more = ("single runs carry the minimum detectable difference on top of their intervals: "
                    "repeat sets of at least 3 on each side (capacity run --repeat 3) replace it with the measured spread")
        else:
            more = "the change sits on the margin: no number of repeats decides"
        check.text = f"{said}: the interval straddles the {margin:.0%} margin; {more}"
    return check


def judge(baseline: AnySummary, candidate: AnySummary, margin: float = DEFAULT_MARGIN,
          baseline_name: str = "", candidate_name: str = "") -> GateResult:
    """The gate's decision and what it rests on (module doc)."""
    c = compare(baseline, candidate)
    both_sets = isinstance(baseline, RepeatSetSummary) and isinstance(candidate, RepeatSetSummary)
    repeats = max(_repeats(baseline), _repeats(candidate))
    checks = [_check(c.row(metric), name, margin, repeats, both_sets, c.compared_level) for metric, name in GATED]
    decision: GateDecision = "worse" if any(x.decision == "worse" for x in checks) else \
        "cannot decide" if any(x.decision == "cannot decide" for x in checks) else "not worse"
    shown = [x for x in checks if x.decision == decision]
    if decision == "not worse":
        line = "not worse — " + "; ".join(x.text for x in checks)
    else:
        line = f"{decision} — " + "; ".join(x.text for x in shown)
    return GateResult(baseline=baseline_name or str(baseline.meta.results_dir),
                      candidate=candidate_name or str(candidate.meta.results_dir),
                      margin=margin, decision=decision, exit_code=EXIT[decision], checks=checks, line=line)
