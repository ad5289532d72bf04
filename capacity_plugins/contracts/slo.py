"""Whether a step meets the SLO, with its uncertainty: one rule for the analysis and the live search.

A latency limit passes when at least `slo.attainment` of the step's measured successful requests
are at or under it (a request with no value, e.g. no first token, counts as over) — "the P95 is
under the limit". Judged with the share's exact interval (Clopper-Pearson): `pass` when even its
lower end reaches the attainment, `fail` when even its upper end misses it, `uncertain` between —
too few requests, or a level right at the limit. The error rate is judged on its point value (a
binomial bound cannot show a 1 % limit met below about 370 requests). A step passes when every
limit passes and its errors are within `slo.error_rate`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Literal

from capacity_plugins.contracts.percentiles import share_interval
from capacity_plugins.contracts.planning import SLOConfig

Judgement = Literal["pass", "fail", "uncertain"]
# The latency limits of an SLO, as (record metric, SLOConfig field).
LIMITS = (("ttft_ms", "ttft_p95_ms"), ("tpot_ms", "tpot_p95_ms"), ("e2e_ms", "e2e_p95_ms"),
          ("first_visible_ms", "first_visible_p95_ms"), ("tpot_visible_ms", "tpot_visible_p95_ms"))


def reasoning_views(first_visible: float | None, tpot_visible: float | None, tpot: float | None,
                    lag_ms: float | None) -> tuple[float | None, float]:
    """(time to first output token, visible TPOT) as the SLO judges them: the first from the
    scheduled time in open loop (`lag_ms`: sent − scheduled); an answer without content never
    showed anything (None: over the limit); an answer without reasoning has every token
    visible (its TPOT), and a null TPOT counts as 0 (vLLM's rule, as for TPOT)."""
    if first_visible is not None and lag_ms is not None:
        first_visible += lag_ms
    pace = tpot_visible if tpot_visible is not None else tpot
    return first_visible, 0.0 if pace is None else pace


def share_judgement(k: int, n: int, target: float, confidence: float) -> Judgement:
    """pass / fail / uncertain: where the interval of the share k/n lies against `target`."""
    lo, hi = share_interval(k, n, confidence)
    if lo is None or hi is None:
        return "uncertain"
    if lo >= target:
        return "pass"
    if hi < target:
        return "fail"
    return "uncertain"


def min_requests_to_show(attainment: float, confidence: float) -> int:
    """The fewest requests, all within the limit, whose share interval reaches `attainment`
    (72 for 95 % at 95 % confidence): the exact lower end for n of n is ((1 − confidence) / 2)^(1/n)."""
    if attainment <= 0:
        return 1
    if attainment >= 1:
        raise ValueError("an attainment of 100 % can never be shown from a sample")
    return max(1, math.ceil(math.log((1.0 - confidence) / 2.0) / math.log(attainment)))


def within(values: Iterable[float | None], limit: float) -> tuple[int, int]:
    """(values at or under the limit, all values); None / NaN count as over."""
    k = n = 0
    for v in values:
        n += 1
        if v is not None and not math.isnan(v) and v <= limit:
            k += 1
    return k, n


def judge_step(views: Mapping[str, Iterable[float | None]], requests: int, errors: int, slo: SLOConfig,
               confidence: float) -> tuple[Judgement, str | None]:
    """(judgement, the limit that failed or was uncertain) of one step; `views` maps each record
    metric (`ttft_ms`, `tpot_ms`, `e2e_ms`) to its successful requests' values, already as the SLO
    judges them (open loop: from the scheduled time; TPOT null → 0)."""
    counts = {metric: within(views.get(metric, ()), getattr(slo, field))
              for metric, field in LIMITS if getattr(slo, field) is not None}
    return judge_counts(counts, requests, errors, slo, confidence)


def judge_counts(counts: Mapping[str, tuple[int, int]], requests: int, errors: int, slo: SLOConfig,
                 confidence: float) -> tuple[Judgement, str | None]:
    """`judge_step` from counts already made: `counts` maps each record metric of LIMITS to
    (values at or under its limit, values) — what the live view keeps per step instead of the
    values themselves."""
    if requests - errors <= 0:
        return "fail", "no successful request"
    if errors / requests > slo.error_rate:
        return "fail", "error_rate"
    worst: tuple[Judgement, str | None] = ("pass", None)
    for metric, field in LIMITS:
        if getattr(slo, field) is None:
            continue
        k, n = counts.get(metric, (0, 0))
        j = share_judgement(k, n, slo.attainment, confidence)
        if j == "fail":
            return "fail", field
        if j == "uncertain":
            worst = ("uncertain", field)
    return worst


def judge_mix(samples: Mapping[str, tuple[Mapping[str, Iterable[float | None]], int, int, SLOConfig]],
              min_requests: int, confidence: float) -> tuple[Judgement, str | None]:
    """A step with workload classes, as the analysis judges the mix: each class (`samples` maps its
    name to its views, measured requests, errors and own SLO) by `judge_step`; a class with fewer
    than `min_requests` cannot show it passes (insufficient). The step fails when any class fails,
    is uncertain when any class is uncertain or too thin, and passes when every class passes. The
    limit named is `<class>.<limit>` (the first failing class's, else the first uncertain one's)."""
    uncertain: str | None = None
    for name, (views, requests, errors, slo) in samples.items():
        if requests <= 0:
            uncertain = uncertain or f"{name}: no measured request"
            continue
        judged, limiting = judge_step(views, requests, errors, slo, confidence)
        if judged == "fail":
            return "fail", f"{name}.{limiting}"
        if judged == "uncertain":
            uncertain = uncertain or f"{name}.{limiting}"
        elif requests < min_requests:
            uncertain = uncertain or f"{name}: {requests} requests < load.min_requests {min_requests}"
    return ("uncertain", uncertain) if uncertain else ("pass", None)
