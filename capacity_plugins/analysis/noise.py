"""Is a change beyond the noise? One rule for `capacity compare` (two runs or repeat sets) and the
prefix-cache probe (two arms of one run): both sides' interval half-widths combined, plus
`verdict.min_detectable_difference` of the before value unless both halves are run-to-run spreads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capacity_plugins.contracts.comparison import Verdict


@dataclass
class Value:
    value: float | None
    half: float  # half-width of its interval (inf: unknown)
    run_to_run: bool  # the half-width is a run-to-run spread (repeats), not a within-run interval


def judge(before: Value, after: Value, higher_is_better: bool | None, mdd: float) -> tuple[Verdict, float | None]:
    """(verdict, the noise the change had to beat)."""
    if before.value is None or after.value is None:
        return "unknown", None
    noise = math.hypot(before.half, after.half)
    if not (before.run_to_run and after.run_to_run):
        noise += mdd * abs(before.value)  # within-run intervals miss the run-to-run spread
    if higher_is_better is None:
        return "info", noise
    d = after.value - before.value
    if not math.isfinite(noise) or abs(d) <= noise:
        return "within noise", noise
    return ("better" if (d > 0) == higher_is_better else "worse"), noise
