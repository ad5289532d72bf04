"""Capacity per node under the SLO: the primary number of the whole product.

A step passes when every latency limit's attainment share is >= slo.attainment and its error
rate is <= slo.error_rate (table.py judges that). Capacity = achieved rps interpolated linearly
between the last passing and the first failing step, against the limiting metric's quantile at
the attainment level (the P95 for 0.95); invalid and insufficient steps never take part. The
result is divided by `replicas_behind_url` (the measured URL fronted that many nodes).

When the bracket is wider than a doubling of the level, the interval is widened to the whole
bracket (last pass's throughput to first fail's): linear interpolation across an unmeasured bend
is not a measurement.

Its interval (`per_node_rps_ci`) runs the same rule twice more: once with every step at the
pessimistic end of its own intervals (throughput at its low end, each limit's quantile at its high
end, attainment at its worse end, so a step passes only when it surely passes) and once at the
optimistic end. The rule is monotone in each of these, so when every step's intervals hold, the
true capacity lies between the two: a conservative envelope. The error-rate limit keeps its point
judgement at both ends: errors come in bursts from one cause (a full queue, a timeout), not as
independent coin flips, and a binomial bound could never show a 1 % limit met below ~370 requests
per step; the table still shows each step's error-rate interval and `slo_judgement`.

Unknown is not zero. When the lowest *valid* level already fails the SLO, the capacity lies
somewhere below it, where nothing was measured: levels below may have been excluded (client
limited, too few requests, a lost worker) or never tested. Then `per_node_rps` is null
(`method: not_measured_below`), its interval too, and `unknown_reason` says what was not measured,
`measure_next` what run would measure it (lower levels, or the excluded ones again with what
they lacked). The one place the data itself shows that no load meets the SLO is a closed-loop
step at one user: a single request alone, nothing queued or batched beside it, already misses a
limit — more nodes cannot make one request faster. Only that is `fails_at_lowest_load` with
capacity 0 (the plan's `infeasible`). An open-loop or trace step at its lowest rate is not that:
requests may still overlap, and a lower rate was not measured.
"""

from __future__ import annotations

import math
from typing import Literal

from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig
from capacity_plugins.contracts.slo import LIMITS, min_requests_to_show
from capacity_plugins.contracts.summary import Capacity, StepSummary

BRACKET_WARN = 0.20
# Wider than a doubling, the straight line between the last pass and the first fail is a guess
# about a curve nobody measured (latency bends sharply at saturation): the interval then spans
# the whole bracket, the only bound the data gives.
BRACKET_INTERVAL = 1.0


def _interp(x0: float, x1: float, y0: float, y1: float, y: float) -> float:
    if y1 == y0:
        return x0
    f = (y - y0) / (y1 - y0)
    return x0 + min(max(f, 0.0), 1.0) * (x1 - x0)


def _limiting(fail: StepSummary, slo: SLOConfig) -> tuple[str, float | None]:
    """The limit the first failing step missed worst (ratio of its quantile to the limit)."""
    worst, ratio = None, -1.0
    for m, v in fail.slo.items():
        if v.passed:
            continue
        q = v.quantile_ms
        r = (q / v.limit_ms) if q is not None and v.limit_ms else float("inf")
        if r > ratio:
            worst, ratio = m, r
    if worst is None:
        if fail.ok_requests == 0:
            return "no_successful_requests", None
        return "error_rate", None
    return worst, ratio


Side = Literal["low", "high"]


def _view(row: StepSummary, side: Side, slo: SLOConfig) -> StepSummary:
    """The row as the pessimistic (`low`) or optimistic (`high`) end of its intervals sees it."""
    low = side == "low"
    rps = row.rps
    ci = row.rps_ci
    if ci and row.rps is not None:
        rps = ci[0] if low else ci[1]
    judged = {}
    for m, v in row.slo.items():
        q_lo, q_hi = v.quantile_ci_ms or (None, None)
        a_lo, a_hi = v.attainment_ci or (None, None)
        q = (q_hi if q_hi is not None else math.inf) if low else (q_lo if q_lo is not None else 0.0)
        a = a_lo if low else a_hi
        judged[m] = v.model_copy(update={"quantile_ms": q, "passed": a is not None and a >= slo.attainment})
    err_ok = row.error_rate is not None and row.error_rate <= slo.error_rate
    return row.model_copy(update={
        "rps": rps, "slo": judged,
        "slo_pass": bool(row.ok_requests > 0 and err_ok and all(v.passed for v in judged.values())),
    })


def capacity_under_slo(rows: list[StepSummary], slo: SLOConfig, cap: CapacityConfig, sweep_kind: str,
                       confidence: float) -> Capacity:
    valid = sorted((r for r in rows if r.valid), key=lambda r: r.level)
    out = _capacity(valid, slo, cap, sweep_kind)
    out.unknown_reason = out.measure_next = None
    if out.per_node_rps is None:
        out.unknown_reason, out.measure_next = _not_measured(rows, out)
        out.notes.insert(0, f"{out.unknown_reason} — {out.measure_next}")
    out.excluded_steps = [r.step for r in rows if not r.valid]
    if out.excluded_steps:
        why = "; ".join(f"{r.level:g}: {r.invalid_reasons[0]}" for r in rows if not r.valid and r.invalid_reasons)
        out.notes.insert(1 if out.unknown_reason else 0, f"steps {out.excluded_steps} excluded ({why})")
    point = out.per_node_rps
    out.per_node_rps_ci = out.per_node_concurrency_ci = out.relative_interval = None
    if point is None:
        return out
    lo = _capacity([_view(r, "low", slo) for r in valid], slo, cap, sweep_kind)
    hi = _capacity([_view(r, "high", slo) for r in valid], slo, cap, sweep_kind)
    rps_ci = out.per_node_rps_ci = [min(lo.per_node_rps or 0.0, point), max(hi.per_node_rps or 0.0, point)]
    conc = out.per_node_concurrency
    if conc is not None:
        out.per_node_concurrency_ci = [min(lo.per_node_concurrency or 0.0, conc),
                                       max(hi.per_node_concurrency or 0.0, conc)]
    width = out.bracket_width
    if out.method == "interpolated" and width is not None and width > BRACKET_INTERVAL:
        assert out.last_pass_rps is not None and out.first_fail_rps is not None  # interpolated: both ends
        rps_ci = out.per_node_rps_ci = [min(rps_ci[0], out.last_pass_rps), max(rps_ci[1], out.first_fail_rps)]
        cc = out.per_node_concurrency_ci
        if cc is not None and sweep_kind == "concurrency":
            assert out.last_pass_level is not None and out.first_fail_level is not None
            r = cap.replicas_behind_url
            out.per_node_concurrency_ci = [min(cc[0], out.last_pass_level / r), max(cc[1], out.first_fail_level / r)]
        out.notes.append(f"the bracket is wider than a doubling ({width:.0%}): the interval spans all of it, "
                         "the interpolated point is only a guess inside")
    if point > 0:
        out.relative_interval = (rps_ci[1] - rps_ci[0]) / point
    if lo.method != out.method:
        short = _too_few_to_show(valid, lo.first_fail_level, slo, confidence)
        why = ""
        if short is not None:
            out.requests_to_show = need = min_requests_to_show(slo.attainment, confidence)
            why = (f": its {short.ok_requests} requests cannot show {slo.attainment:.0%} within the limits at "
                   f"{confidence:.0%} confidence, which takes at least {need} even when every one is within")
        out.notes.append(f"at the pessimistic end of the step intervals the method becomes {lo.method}"
                         + (f" (the SLO may already fail at level {lo.first_fail_level:g}{why})"
                            if lo.first_fail_level is not None else ""))
    return out


def _too_few_to_show(valid: list[StepSummary], level: float | None, slo: SLOConfig,
                     confidence: float) -> StepSummary | None:
    """The step at `level` when it passes as measured but holds fewer successful requests than any
    step needs to show the attainment: its pessimistic fail is the sample's size, not its latency."""
    row = next((r for r in valid if r.level == level), None)
    if row is None or not row.slo_pass or row.ok_requests >= min_requests_to_show(slo.attainment, confidence):
        return None
    return row


def _capacity(valid: list[StepSummary], slo: SLOConfig, cap: CapacityConfig, sweep_kind: str) -> Capacity:
    """The capacity rule on valid rows sorted by level (one end of the interval, or the point)."""
    replicas = cap.replicas_behind_url
    out = Capacity(per_node_rps=None, per_node_concurrency=None, limiting_slo=None, last_pass_level=None,
                   first_fail_level=None, method=None, replicas_behind_url=replicas, notes=[])
    if not valid:
        out.method = "no_valid_steps"
        return out

    no_limits = slo.itl_p95_ms is None and all(getattr(slo, k) is None for _m, k in LIMITS)
    if no_limits:
        # Without an SLO the only defensible figure is a utilisation cap on the best sustained
        # throughput; with an SLO this cap would be double headroom (docs/capacity.md).
        best = max(valid, key=lambda r: r.rps or 0.0)
        out.method, out.last_pass_level = "utilisation_cap", best.level
        out.per_node_rps = (best.rps or 0.0) * cap.utilisation_cap / replicas
        if sweep_kind == "concurrency":
            out.per_node_concurrency = best.level * cap.utilisation_cap / replicas
        out.notes.append(f"no SLO limit set: {cap.utilisation_cap:.0%} of the best sustained throughput")
        return out

    first_fail = next((i for i, r in enumerate(valid) if not r.slo_pass), None)
    if first_fail == 0:
        fail = valid[0]
        out.first_fail_level, out.limiting_slo = fail.level, _limiting(fail, slo)[0]
        if single_request(fail):
            out.method, out.per_node_rps = "fails_at_lowest_load", 0.0
            out.notes.append("the SLO fails already with one request at a time (1 user): no number of nodes "
                             "meets it — capacity 0 under this SLO")
        else:  # below the first failing level nothing was measured (module doc): unknown, not 0
            out.method = "not_measured_below"
        return out
    if first_fail is None:
        # The best passing step, not simply the last: past saturation throughput can dip.
        top = max(valid, key=lambda r: (r.rps or 0.0, -r.level))
        out.method, out.last_pass_level = "never_failed", valid[-1].level
        out.per_node_rps, out.bracket_requests = (top.rps or 0.0) / replicas, top.requests
        if sweep_kind == "concurrency":
            out.per_node_concurrency = top.level / replicas
        out.notes.append("the SLO held at every level: capacity is at least this; extend the sweep")
        return out

    passed, fail = valid[first_fail - 1], valid[first_fail]
    later_pass = [r.level for r in valid[first_fail + 1:] if r.slo_pass]
    if later_pass:
        out.notes.append(f"levels {later_pass} passed again after the first failure (noise?): the first failure sets capacity")
    metric, _ = _limiting(fail, slo)
    x0, x1 = passed.rps or 0.0, fail.rps or 0.0
    f_rps: float
    f_lvl: float
    if metric in passed.slo and metric in fail.slo and fail.slo[metric].quantile_ms is not None:
        y0 = passed.slo[metric].quantile_ms
        y1 = fail.slo[metric].quantile_ms
        lim = fail.slo[metric].limit_ms
        assert y0 is not None and y1 is not None and lim is not None  # a judged limit has all three
        f_rps = _interp(x0, x1, y0, y1, lim) if x1 > x0 and y1 > y0 else x0
        f_lvl = _interp(passed.level, fail.level, y0, y1, lim) if y1 > y0 else passed.level
    elif metric == "error_rate":
        e0, e1 = passed.error_rate or 0.0, fail.error_rate or 0.0
        f_rps = _interp(x0, x1, e0, e1, slo.error_rate) if x1 > x0 and e1 > e0 else x0
        f_lvl = _interp(passed.level, fail.level, e0, e1, slo.error_rate) if e1 > e0 else passed.level
    else:
        f_rps, f_lvl = x0, passed.level
    best = max(valid[:first_fail], key=lambda r: (r.rps or 0.0, -r.level))
    if (best.rps or 0.0) > f_rps:
        # an earlier passing step carried more than the interpolated point (throughput dipped)
        f_rps, f_lvl = best.rps or 0.0, best.level
        out.notes.append(f"throughput peaked at level {best.level:g} before the SLO failed: capacity taken there")
    out.method, out.limiting_slo = "interpolated", metric
    out.last_pass_level, out.first_fail_level = passed.level, fail.level
    out.per_node_rps = f_rps / replicas
    out.last_pass_rps, out.first_fail_rps = x0 / replicas, x1 / replicas
    # The fewer requests of the two steps the capacity is read between: what its interval's
    # width scales with (plan.py says how many would narrow it enough).
    out.bracket_requests = min(passed.requests, fail.requests)
    if sweep_kind == "concurrency":
        out.per_node_concurrency = f_lvl / replicas
    elif passed.e2e_mean_ms:
        # Little's law: requests in flight at the capacity point (rate sweeps).
        out.per_node_concurrency = f_rps * passed.e2e_mean_ms / 1000 / replicas
    width = (fail.level - passed.level) / passed.level if passed.level else None
    out.bracket_width = width
    if width is not None and width > BRACKET_WARN:
        out.notes.append(
            f"bracket {passed.level:g}–{fail.level:g} is {width:.0%} wide: add levels in between to refine"
        )
    return out


def single_request(row: StepSummary) -> bool:
    """A closed-loop step at one user: each request ran alone (the only load below which nothing is)."""
    return not row.open_loop and row.kind != "trace" and row.level <= 1


def level_words(row: StepSummary, level: float | None = None) -> str:
    """'16 users' (closed loop) or '4.5 req/s' (open loop, trace)."""
    v = row.level if level is None else level
    if row.open_loop or row.kind in ("rate", "trace"):
        return f"{v:.3g} req/s"
    return f"{v:g} user" + ("" if v == 1 else "s")


# The first word of a step's invalid reason (analysis/validity.py) → what a rerun of it needs.
RERUN_WITH = {
    "client limited": "more load-generator processes (--processes N)",
    "insufficient": "longer steps (each needs its minimum of measured requests)",
    "swarm changed": "a swarm that stays whole (no worker lost or joining)",
    "interrupted": "the run left to finish",
    "no measured requests": "longer steps",
    "no successful request": "the errors there fixed first",
}


def _lower_levels(row: StepSummary) -> str:
    """A few levels below a failing one, for the advice: 1, 2, 4, 8 users below 16; halvings of a rate."""
    top = row.level
    if row.open_loop or row.kind in ("rate", "trace"):
        vals = [top / 8, top / 4, top / 2]
        return ", ".join(f"{v:.3g}" for v in vals) + " req/s"
    vals, v = [], 1.0
    while v < top:
        vals.append(v)
        v *= 2
    vals = vals[-4:] if vals else [max(top / 2, 1)]
    return ", ".join(f"{x:g}" for x in vals) + " users"


def _not_measured(rows: list[StepSummary], out: Capacity) -> tuple[str, str]:
    """(what was not measured, what run would measure it) for a capacity that is unknown."""
    fail_level = out.first_fail_level
    failed = next((r for r in rows if r.valid and r.level == fail_level), None)

    def excluded(r: StepSummary) -> bool:
        # a cache probe's cache arm is compared apart, never part of the capacity sweep
        return not r.valid and not any(x.startswith("cache arm") for x in r.invalid_reasons)

    skipped = [r for r in rows if excluded(r) and (fail_level is None or r.level < fail_level)]
    kinds: list[str] = []
    for r in skipped:
        first = (r.invalid_reasons or ["excluded"])[0].split(":", 1)[0].strip()
        if first not in kinds:
            kinds.append(first)
    if skipped:
        levels = sorted({r.level for r in skipped})
        lv = (level_words(skipped[0], levels[0]) if len(levels) == 1
              else f"{levels[0]:g}–{level_words(skipped[0], levels[-1])}")
        excl = f"level{'s' if len(levels) > 1 else ''} {lv} {'were' if len(levels) > 1 else 'was'} excluded: " \
               + ", ".join(kinds)
        needs = [RERUN_WITH[k] for k in kinds if k in RERUN_WITH]
        with_ = f" with {' and '.join(needs)}" if needs else ""
    if failed is None:  # no valid step at all
        reason = f"no valid step ({excl}): the capacity was not measured" if skipped else \
            "no valid step: the capacity was not measured"
        todo = f"rerun the sweep{with_}" if skipped else "rerun the sweep"
        return reason, todo
    at = level_words(failed)
    if skipped:
        reason = (f"the SLO already fails at {at}, the lowest valid level ({excl}): capacity below {at} was not "
                  "measured")
        return reason, f"rerun the levels below {at}{with_}"
    reason = f"the SLO already fails at {at}, the lowest level tested: capacity below {at} was not measured"
    return reason, f"add lower levels (e.g. {_lower_levels(failed)})"
