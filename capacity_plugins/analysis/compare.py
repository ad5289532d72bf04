"""The comparison behind `capacity compare A B`: the before/after table of docs/capacity.md, each change judged against the noise.

The before/after review (docs/capacity.md): capacity, throughput, P50, P99, GPU util, cost per 1k
requests, cache hit rate — "if QPS rose and cost fell, resources are used better; if QPS did not
rise and GPU util fell, the bottleneck is elsewhere: roll back". A and B are each one run's
results folder (or its summary.json) or a repeat set (analysis/repeats.py); a folder without
summary.json is analysed in memory first (compare writes nothing but `--out`).

Where: the highest load level both runs measured validly *below saturation* (at or under each
run's knee; a run without a knee was below saturation at every valid level). Past the knee the
server queues and latency reflects the queue length the load generator chose, not the server, so
an overloaded top level would compare two arbitrary queues.

When: a row says better or worse only when the change exceeds the combined uncertainty of both
sides: with repeats, the run-to-run spread (Student t on the repeats); with a single run, its
within-run interval (analysis/intervals.py) *plus* `verdict.min_detectable_difference` (10 %) of
the before value, because a within-run interval knows nothing of how much a second run differs.
Otherwise the row is `within noise`. A run without valid steps cannot be compared: exit 2.

What moved: the bottom line lists every row judged better or worse — worse first — with its change
and the change's interval (the change ± the noise it had to beat, relative to the before value),
and says `within noise` only when no row moved beyond its noise. Every judged row counts: a TTFT
P95 that fell 85 % is an improvement even when the throughput at the compared level did not move.

This module computes the comparison (contracts/comparison.py); the command is `cli/compare.py`, the
Markdown table `outputs/compare.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from capacity_plugins.analysis.intervals import half_width, t_quantile
from capacity_plugins.analysis.noise import Value, judge
from capacity_plugins.contracts.comparison import CompareRow, Comparison, Moved, NoiseBasis, Overall
from capacity_plugins.contracts.document import Interval, read_json
from capacity_plugins.contracts.summary import (
    AnySummary,
    LevelStats,
    RepeatSetSummary,
    SetLevel,
    StepSummary,
    Summary,
    summary_from_json,
)
from capacity_plugins.errors import UserError

# The figures compared at the compared level: label, higher is better (None: informational), a
# single run's step figure with its interval, a repeat set's per-level spread of the same figure.
LEVEL_ROWS: tuple[tuple[str, bool | None, Callable[[StepSummary], tuple[float | None, Interval | None]],
                        Callable[[SetLevel], LevelStats]], ...] = (
    ("QPS at compared level", True, lambda r: (r.rps, r.rps_ci), lambda e: e.rps),
    ("E2E P50 ms", False, lambda r: (r.e2e_p50_ms, r.e2e_p50_ci_ms), lambda e: e.e2e_p50_ms),
    ("E2E P99 ms", False, lambda r: (r.e2e_p99_ms, r.e2e_p99_ci_ms), lambda e: e.e2e_p99_ms),
    ("TTFT P95 ms", False, lambda r: (r.ttft_p95_ms, r.ttft_p95_ci_ms), lambda e: e.ttft_p95_ms),
    ("GPU util %", None, lambda r: (r.gpu_util_pct, None), lambda e: e.gpu_util_pct),
)


def load_summary(path: Path, progress=None) -> AnySummary:
    """A side of the comparison: a summary.json, or the folder holding one; a results folder or repeat
    set without one is analysed in memory (compare writes nothing of it)."""
    path = Path(path)
    f = path / "summary.json" if path.is_dir() else path
    if not f.exists():
        from capacity_plugins.analysis.pipeline import load_run, summarise
        from capacity_plugins.analysis.repeats import is_repeat_set, read_repeats, summarise_set

        if path.is_dir() and is_repeat_set(path):
            folders = read_repeats(path)
            return summarise_set(path, [x.name for x in folders], [summarise(load_run(x, None, progress)) for x in folders])
        if path.is_dir() and (path / "requests.jsonl").exists():
            return summarise(load_run(path, None, progress))
        raise UserError(f"{path}: no summary.json and no requests.jsonl (not a results folder)")
    return summary_from_json(read_json(f), str(f))


def _value(v: float | None, ci: Interval | None, run_to_run: bool = False) -> Value:
    """A figure with the half-width of its interval (0 without one: a point comparison)."""
    return Value(v, half_width(v, ci[0], ci[1]) if ci and v is not None else 0.0, run_to_run)


class Side:
    """One side of the comparison: a single run's summary or a repeat set's, seen the same way."""

    def __init__(self, label: str, summary: AnySummary) -> None:
        self.label, self.s = label, summary
        self.is_set = isinstance(summary, RepeatSetSummary)
        self.confidence = float(summary.verdict_settings.confidence)
        self.levels = self._valid_levels()
        if not self.levels:
            raise UserError(f"{label}: no valid step (every step invalid, insufficient or empty): nothing to compare")

    def _valid_levels(self) -> list[float]:
        if isinstance(self.s, RepeatSetSummary):
            return sorted(e.level for e in self.s.levels if e.valid_repeats)
        return sorted(r.level for r in self.s.steps if r.valid)

    @property
    def saturation(self) -> float:
        """The knee (the highest level still below saturation); inf when no knee was seen."""
        v = self.s.knee.min if isinstance(self.s, RepeatSetSummary) else self.s.knee.value
        return math.inf if v is None else float(v)

    def at(self, level: float | None, of_step: Callable[[StepSummary], tuple[float | None, Interval | None]],
           of_set: Callable[[SetLevel], LevelStats]) -> Value:
        if level is None:
            return Value(None, math.inf, False)
        if isinstance(self.s, RepeatSetSummary):
            return _from_stats(of_set(next(x for x in self.s.levels if x.level == level)), self.confidence)
        return _value(*of_step(next(x for x in self.s.steps if x.level == level and x.valid)))

    @property
    def _run_to_run(self) -> bool:
        return self.is_set and self.s.capacity.interval_kind == "run_to_run"

    def capacity(self) -> Value:
        cap = self.s.capacity
        return _value(cap.per_node_rps, list(cap.per_node_rps_ci) if cap.per_node_rps_ci else None, self._run_to_run)

    def max_throughput(self) -> Value:
        if isinstance(self.s, RepeatSetSummary):
            best = max(self.s.levels, key=lambda e: (e.rps.mean or 0.0))
            return _from_stats(best.rps, self.confidence)
        row = max((r for r in self.s.steps if r.valid), key=lambda r: r.rps or 0.0)
        return _value(row.rps, row.rps_ci)

    def cost(self) -> Value:
        # the cost is the GPU-hour price over the capacity: it carries the capacity's interval
        if not isinstance(self.s, Summary):  # a repeat set has no cost of its own
            return Value(None, 0.0, self._run_to_run)
        cost = self.s.cost
        ci = cost.per_1k_requests_ci_usd
        return _value(cost.per_1k_requests_usd, list(ci) if ci else None, self._run_to_run)

    def cache(self) -> Value:
        return Value(self.s.meta.cache_hit_rate(), 0.0, False)


def _from_stats(st: LevelStats, confidence: float) -> Value:
    """A repeat set's per-level figure: the mean, with the t half-width of the mean over its repeats."""
    mean, sd, n = st.mean, st.sd, st.n or 0
    if mean is None:
        return Value(None, math.inf, True)
    if sd is None or n < 2:
        return Value(mean, 0.0, False)  # one repeat: a single run in all but name
    t = t_quantile(1 - (1 - confidence) / 2, n - 1)
    return Value(mean, t * sd / math.sqrt(n), True)


def compare(a: AnySummary, b: AnySummary, mdd: float | None = None) -> Comparison:
    before, after = Side("before", a), Side("after", b)
    if mdd is None:
        mdd = float(a.verdict_settings.min_detectable_difference)
    common = [lv for lv in set(before.levels) & set(after.levels)
              if lv <= before.saturation and lv <= after.saturation]
    level = max(common) if common else None
    spec: list[tuple[str, Value, Value, bool | None]] = [
        ("capacity per node under SLO (rps)", before.capacity(), after.capacity(), True),
        ("max throughput (rps)", before.max_throughput(), after.max_throughput(), True),
    ]
    for label, hib, of_step, of_set in LEVEL_ROWS:
        spec.append((label, before.at(level, of_step, of_set), after.at(level, of_step, of_set), hib))
    spec += [("cost per 1k requests USD", before.cost(), after.cost(), False),
             ("cache hit rate", before.cache(), after.cache(), True)]
    rows: list[CompareRow] = []
    for m, x, y, hib in spec:
        verdict, noise = judge(x, y, hib, mdd)
        rows.append(CompareRow(metric=m, before=x.value, after=y.value,
                               change=(y.value / x.value - 1) if x.value and y.value is not None else None,
                               change_ci=change_interval(x.value, y.value, noise) if verdict in ("better", "worse") else None,
                               noise=noise, verdict=verdict))
    by = {r.metric: r for r in rows}
    # every row judged beyond its noise moved, whichever it is: worse first, then better, in table order
    moved = [r for r in rows if r.verdict == "worse"] + [r for r in rows if r.verdict == "better"]
    overall: Overall = "regressed" if any(r.verdict == "worse" for r in moved) else "improved" if moved else "within noise"
    advice = []
    gpu = by["GPU util %"]
    throughput_rose = any(by[k].verdict == "better" for k in
                          ("QPS at compared level", "max throughput (rps)", "capacity per node under SLO (rps)"))
    if not throughput_rose and gpu.before is not None and gpu.after is not None \
            and gpu.after < gpu.before * (1 - mdd):
        advice.append("QPS did not rise while GPU util fell: the bottleneck is not GPU capacity — roll back and profile")
    if throughput_rose and by["cost per 1k requests USD"].verdict == "better":
        advice.append("QPS up and cost per request down: resources are used better")
    where = (f"the highest level both runs measured validly below saturation (knees: before "
             f"{_lvl(before.saturation)}, after {_lvl(after.saturation)})") if level is not None else \
        "no level both runs measured validly below saturation: only capacity and max throughput are compared"
    return Comparison(
        compared_level=level, compared_where=where, rows=rows, overall=overall,
        moved=[Moved(metric=r.metric, verdict=r.verdict, change=r.change, change_ci=r.change_ci,
                     text=_moved_text(r, level)) for r in moved],
        bottom_line=_bottom_line(overall, moved, level, before.is_set and after.is_set, mdd), advice=advice,
        noise_basis=NoiseBasis(before="repeats" if before.is_set else "within-run + min detectable difference",
                               after="repeats" if after.is_set else "within-run + min detectable difference",
                               min_detectable_difference=mdd),
        before=a.meta.results_dir, after=b.meta.results_dir)


def change_interval(before: float | None, after: float | None, noise: float | None) -> list[float] | None:
    """The relative change's interval: the difference ± the noise it had to beat, over the before value.

    Every compared figure is a rate, a duration, a price or a share, never negative: a fall of more
    than 100 % is impossible, so the lower end stops at −100 %."""
    if not before or after is None or noise is None or not math.isfinite(noise):
        return None
    d = after - before
    return [max((d - noise) / abs(before), -1.0), (d + noise) / abs(before)]


# how the bottom line names a row (the level rows are measured at the compared level)
SHORT = {"capacity per node under SLO (rps)": "capacity", "max throughput (rps)": "max throughput",
         "QPS at compared level": "QPS", "E2E P50 ms": "E2E P50", "E2E P99 ms": "E2E P99", "TTFT P95 ms": "TTFT P95",
         "cost per 1k requests USD": "cost per 1k requests", "cache hit rate": "cache hit rate"}
AT_LEVEL = {label for label, _, _, _ in LEVEL_ROWS}


def pct(x: float) -> str:
    """A relative change in percent to two significant digits: +23, −85, +4.5, +0.42 (a true minus)."""
    v = x * 100
    digits = 0 if abs(v) >= 9.95 else 1 if abs(v) >= 0.995 else 2
    return f"{v:+.{digits}f}".replace("-", "\u2212")


def _moved_text(r: CompareRow, level: float | None) -> str:
    """One moved row: `capacity +23 % [+12, +35] better`."""
    name = SHORT.get(r.metric, r.metric)
    if r.metric in AT_LEVEL and level is not None:
        name += f" at level {level:g}"
    if r.change is None:  # a before value of zero: no relative change
        return f"{name} {fmt_value(r.before)} → {fmt_value(r.after)} {r.verdict}"
    ci = r.change_ci
    interval = f" [{pct(ci[0])}, {pct(ci[1])}]" if ci else ""
    return f"{name} {pct(r.change)} %{interval} {r.verdict}"


def _bottom_line(overall: str, moved: list[CompareRow], level: float | None, repeats: bool, mdd: float) -> str:
    """What moved beyond the noise, worse first; `within noise` only when nothing did — then what
    would tell: single runs carry the minimum detectable difference on top of their intervals,
    which only repeats (the run-to-run spread, measured) replace; a repeat set's interval narrows
    with √repeats."""
    if not moved:
        decide = ("more repeats on each side would narrow it (the interval shrinks with √repeats)" if repeats else
                  f"single runs cannot show a change under {mdd:.0%} plus their own noise: compare repeat sets "
                  "(capacity run --repeat 3 on each side), whose measured run-to-run spread replaces that allowance")
        return f"within noise — nothing moved beyond the noise; to tell: {decide}"
    parts = [_moved_text(r, level) for r in moved]
    if not any(r.verdict == "worse" for r in moved):
        parts.append("nothing worse beyond noise")
    elif not any(r.verdict == "better" for r in moved):
        parts.append("nothing better beyond noise")
    return f"{overall} — " + "; ".join(parts)


def _lvl(v: float) -> str:
    return "none seen" if not math.isfinite(v) else f"{v:g}"


def fmt_value(v: float | None) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "∞"
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
