"""The prefix-cache probe's answer: is the cache hiding the real load?

A `cache_probe` run measures each level twice, back to back: the corpus's distinct prompts, then a
cache arm whose prompts share a long prefix or repeat (corpus/cache_arms.py). Per level this
compares the two steps' TTFT P50 / P95 and throughput, each with its interval, and the server's
prefix-cache hit rate in each (telemetry series `prefix_cache_hit_rate`, when its /metrics were
scraped).

A difference counts only beyond the noise, judged as `capacity compare` judges two single runs
(analysis/noise.py `judge`): both steps' interval half-widths combined, plus
`verdict.min_detectable_difference` of the distinct arm's value — the arms are two steps measured
one after the other, and a within-step interval knows nothing of how much a step run again differs.

Capacity, knee and plan count the distinct arm only: the cache-arm steps are invalid for them
(analysis/validity.py), which is the point of the probe — the distinct arm is the real load.

The summary's section `cache_probe` (analysis/sections.py), which the `cache_probe` load kind names
(`LoadKind.summary_section`); it adds a note to the capacity saying so.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from capacity_plugins.analysis.intervals import half_width
from capacity_plugins.analysis.load import RunData, Step
from capacity_plugins.analysis.noise import Value, judge
from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.analysis.step_telemetry import step_rows
from capacity_plugins.analysis.validity import CACHE_ARM_REASON
from capacity_plugins.contracts.document import Interval
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.summary import (
    CacheProbe,
    Capacity,
    ProbeArm,
    ProbeDelta,
    ProbeLevel,
    StepSummary,
)

DISTINCT = "distinct"
# The figures the arms are compared on, by the key of `deltas`: (words, higher is better, the figure
# with its interval, of a step row or an arm)
COMPARED_FIGURES: dict[str, tuple[str, bool, Callable[[StepSummary | ProbeArm], tuple[float | None, Interval | None]]]] = {
    "ttft_p50_ms": ("TTFT P50", False, lambda r: (r.ttft_p50_ms, r.ttft_p50_ci_ms)),
    "ttft_p95_ms": ("TTFT P95", False, lambda r: (r.ttft_p95_ms, r.ttft_p95_ci_ms)),
    "rps": ("throughput", True, lambda r: (r.rps, r.rps_ci)),
}
# A distinct arm whose own prompts hit the cache this often is flattered too (its corpus repeats).
DISTINCT_HIT_WARN = 0.1
ARM_WORDS = {"shared_prefix": "with shared prefixes", "repeat": "with repeated prompts"}


@section("cache_probe")
class CacheProbeSection(AnalysisSection):
    """A `cache_probe` run's comparison of its arms; the capacity says it counts the distinct arm only."""

    def step_records(self, run: RunData) -> PromptTokens:
        return PromptTokens()

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> CacheProbe | None:
        return cache_probe(run, rows, run.meta)

    def capacity(self, found: CacheProbe, cap: Capacity, run: RunData) -> Capacity:
        cap.notes.append(f"cache probe: capacity counts the distinct arm only; the {found.arm} arm is "
                         "compared in the prefix-cache probe")
        return cap


def cache_probe(run: RunData, rows: list[StepSummary], meta: Meta | None = None) -> CacheProbe | None:
    """summary.json `cache_probe` (contracts/summary.py); None unless the run's steps carry arms."""
    steps = {st.index: st for st in run.steps}
    if not any(st.arm for st in run.steps):
        return None
    cache_arm = next((st.arm for st in run.steps if st.arm not in (None, DISTINCT)), None)
    vs = run.verdict
    levels: list[ProbeLevel] = []
    for level in sorted({r.level for r in rows if r.arm}):
        d = next((r for r in rows if r.level == level and r.arm == DISTINCT), None)
        c = next((r for r in rows if r.level == level and r.arm not in (None, DISTINCT)), None)
        either = d or c
        distinct, cache = _arm(run, steps, d), _arm(run, steps, c)
        levels.append(ProbeLevel(
            level=level,
            unit="rps" if either is not None and either.kind in ("rate", "peak") else "users",
            distinct=distinct,
            cache=cache,
            compared=bool(d and c and distinct.sound and cache.sound),
            deltas={key: _delta(d, c, key, vs.min_detectable_difference) for key in COMPARED_FIGURES} if d and c else {},
        ))
    caching = server_prefix_caching(meta or Meta())
    status, answer, notes = _answer(levels, cache_arm, caching)
    return CacheProbe(
        arm=cache_arm,
        counted_arm=DISTINCT,
        spec=(meta or Meta()).cache_probe,
        server_prefix_caching=caching,
        min_detectable_difference=vs.min_detectable_difference,
        levels=levels,
        status=status,
        answer=answer,
        notes=notes,
    )


def _arm(run: RunData, steps: dict[int, Step], row: StepSummary | None) -> ProbeArm:
    if row is None:
        return ProbeArm(step=None, sound=False, problems=["not measured"])
    # The step's own problems: the cache arm's standing exclusion from capacity is not one.
    problems = [r for r in row.invalid_reasons if not r.startswith(CACHE_ARM_REASON)]
    return ProbeArm(
        step=row.step, sound=not problems, problems=problems, requests=row.requests,
        ttft_p50_ms=row.ttft_p50_ms, ttft_p50_ci_ms=row.ttft_p50_ci_ms,
        ttft_p95_ms=row.ttft_p95_ms, ttft_p95_ci_ms=row.ttft_p95_ci_ms,
        rps=row.rps, rps_ci=row.rps_ci,
        output_tokens_per_s=row.output_tokens_per_s,
        prompt_tokens_mean=_prompt_tokens(run, row.step),
        prefix_cache_hit_rate=_hit_rate(run, steps[row.step]),
    )


def _value(row: StepSummary, key: str) -> Value:
    """The figure `key` of a row, with the half-width of its interval (0 without one)."""
    v, ci = COMPARED_FIGURES[key][2](row)
    return Value(v, half_width(v, ci[0], ci[1]) if ci else 0.0, False)


def _delta(d: StepSummary, c: StepSummary, key: str, mdd: float) -> ProbeDelta:
    before, after = _value(d, key), _value(c, key)
    verdict, noise = judge(before, after, COMPARED_FIGURES[key][1], mdd)
    change = (after.value / before.value - 1) if before.value and after.value is not None else None
    return ProbeDelta(distinct=before.value, cache=after.value, change=change,
                      noise=noise if noise is not None and math.isfinite(noise) else None,
                      # better: the cache arm looks better than the real load does
                      judgement={"better": "cache_flatters", "worse": "cache_arm_worse"}.get(verdict, verdict))


class PromptTokens:
    """A step consumer (step_records.py): each step's mean prompt tokens the server counted in its
    measured successful requests, on the analysis's walk over the steps."""

    def __init__(self) -> None:
        self.mean: dict[int, float | None] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        sel = records[~records["warmup"] & records["ok"]]["prompt_tokens"].to_numpy(float)
        sel = sel[np.isfinite(sel)]
        self.mean[index] = float(sel.mean()) if sel.size else None


def _prompt_tokens(run: RunData, index: int) -> float | None:
    """Mean prompt tokens the server counted in the step's measured successful requests."""
    return gathered(run, "cache_probe", PromptTokens).mean.get(index)


def _hit_rate(run: RunData, st: Step) -> float | None:
    """The server's prefix-cache hit rate over the step (mean of its scrape intervals; None when
    the server's metrics were not scraped or carry no such counter)."""
    sel = step_rows(run, st)
    if sel is None:
        return None
    values = sel[sel["series"] == "prefix_cache_hit_rate"]["value"].dropna()
    return float(values.mean()) if len(values) else None


def server_prefix_caching(meta: Meta) -> bool | None:
    """Whether a scraped server says its prefix caching is on (vLLM's, and the simulator's,
    `vllm:cache_config_info{enable_prefix_caching}` in meta.json's telemetry provenance)."""
    said = {str((info.get("vllm:cache_config_info") or {}).get("enable_prefix_caching")).lower()
            for info in meta.target_infos()}
    if "true" in said:
        return True
    return False if "false" in said else None


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.0f} %"


def _judged_ttft(e: ProbeLevel) -> tuple[str, ProbeDelta]:
    """The TTFT percentile a level is judged on: P95, or P50 when a step has too few requests to
    bound its P95 (the noise is then unknown, and nothing could ever count as beyond it)."""
    d95 = e.deltas["ttft_p95_ms"]
    if d95.noise is not None or d95.change is None:
        return "P95", d95
    return "P50", e.deltas["ttft_p50_ms"]


def _answer(levels: list[ProbeLevel], arm: str | None, caching: bool | None) -> tuple[str, str, list[str]]:
    """(status, the one-line answer, notes) to "is the cache hiding the real load?"."""
    words = ARM_WORDS.get(arm or "", "in the cache arm")
    notes: list[str] = []
    for e in levels:
        if not e.compared:
            why = "; ".join(e.distinct.problems + e.cache.problems) or "an arm is missing"
            notes.append(f"level {e.level:g} {e.unit}: not compared ({why})")
        elif _judged_ttft(e)[0] == "P50":
            notes.append(f"level {e.level:g} {e.unit}: too few requests to bound TTFT P95 "
                         f"({e.distinct.requests} and {e.cache.requests}): judged on P50 (longer steps "
                         "or a higher load.min_requests bound the P95)")
        hit_d = e.distinct.prefix_cache_hit_rate
        if hit_d is not None and hit_d >= DISTINCT_HIT_WARN:
            notes.append(f"level {e.level:g}: the distinct arm's own prompts hit the cache ({hit_d:.0%} of prompt "
                         "tokens): the corpus shares prefixes, so even the distinct arm is flattered "
                         "(check it with `capacity corpus stats`)")
    compared = [e for e in levels if e.compared]
    if not compared:
        return "not_compared", "The prefix-cache probe could not compare the arms at any level (see the notes).", notes
    judged = [(e, *_judged_ttft(e)) for e in compared]
    known = [h for e in compared if (h := e.cache.prefix_cache_hit_rate) is not None]
    hit_text = (f"; the server's prefix-cache hit rate in the cache arm was {min(known):.0%}"
                + (f"–{max(known):.0%}" if max(known) - min(known) >= 0.005 else "")) if known else ""
    flattered = [x for x in judged if x[2].judgement == "cache_flatters"]
    if flattered:
        e, label, d = min(flattered, key=lambda x: x[2].change or 0.0)
        return "cache_flatters", (
            f"TTFT {label} is {_pct(d.change or 0.0)} lower {words} (at {e.level:g} {e.unit}: "
            f"{d.distinct:.0f} → {d.cache:.0f} ms, beyond the noise of ± {d.noise:.0f} ms){hit_text}: "
            "a benchmark on such prompts would overstate capacity — the capacity here counts the distinct arm "
            "only"), notes
    worse = [x for x in judged if x[2].judgement == "cache_arm_worse"]
    if worse:
        e, label, d = worse[0]
        return "cache_arm_worse", (
            f"No sign the cache flatters: TTFT {label} is {_pct(d.change or 0.0)} higher {words} at {e.level:g} "
            f"{e.unit} ({d.distinct:.0f} → {d.cache:.0f} ms){hit_text}"), notes
    spread = ", ".join(
        f"{label} {(d.change or 0) * 100:+.0f} % ± "
        + (f"{d.noise / d.distinct * 100:.0f} %" if d.noise is not None and d.distinct else "∞")
        + f" at {e.level:g} {e.unit}" for e, label, d in judged)
    answer = f"No cache effect beyond noise: TTFT {spread} {words}{hit_text}"
    if caching is False:
        answer += " — the server reports prefix caching off (vllm:cache_config_info enable_prefix_caching)"
    elif known and max(known) < 0.05:
        answer += " — the server cached next to nothing: is prefix caching off?"
    elif known:
        answer += " — the cache served tokens, but prefill is not where the time goes at these levels"
    return "no_effect", answer, notes
