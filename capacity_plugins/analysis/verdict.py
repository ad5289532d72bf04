"""Verdict (scale / dont_scale_yet / observe), bottleneck hints and the checklists of docs/capacity.md.

Rules (docs/capacity.md, "Verdict"), in order; every threshold comes from the scenario's `slo`
and `verdict` sections (or flags):
- fewer than `verdict.min_valid_steps` valid steps → observe (the curve is not measured);
- latency over the SLO while GPU util < `verdict.gpu_idle_pct` and the server queue <
  `verdict.queue_idle_max` → dont_scale_yet: the bottleneck is not the GPU;
- no capacity (unknown: what was not measured and what to run next; or 0: the SLO fails with one
  request at a time), no forecast, or a plan that refused → observe;
- nodes needed <= current_nodes → dont_scale_yet (the fleet carries the peak);
- forecast peak between `verdict.trigger_share` and 100 % of current capacity → observe;
- no GPU telemetry → observe;
- GPU util > `verdict.gpu_busy_pct` (or KV cache > `verdict.kv_cache_full`), and at the forecast
  peak the SLO fails (or, when `verdict.peak_e2e_p99_ms` is set, E2E P99 exceeds it), and nodes
  needed > current → scale;
- otherwise observe, with what to measure next.
When the target was the embedded simulator, GPU readings are called simulated.
Whatever the decision, two reasons from where TTFT goes follow it (analysis/ttft_breakdown.py):
the server queue taking at least `verdict.queue_dominant_share` of TTFT at the loaded step, and a
client remainder over `verdict.client_remainder_max_ms` at any valid step.

Reasons, bottleneck hints and `measure_next` are plain words a planner reads: no configuration
key inside a sentence. The settings that decided them are listed apart in `settings`, each
`{"key": "verdict.gpu_busy_pct", "value": 85.0, "meaning": "GPU counted busy above this (%)"}`,
once, in the order the reasons first used them (the plan's own settings included). The decision
rests on one step (`evidence_levels.decided_at`: the first failing valid step, else the highest
passing one; the busy step a scale rests on): the reasons and the hints quote that step's GPU
figure, so the same step has the same figure everywhere. The forecast peak (a traffic rate) and
the tested levels (users, or offered req/s) are named apart. `rule` names the rule above that
decided (too_few_valid_steps, gpu_not_the_bottleneck, capacity_unknown, capacity_zero_within_noise,
infeasible, no_peak, plan_refused, fleet_carries_the_peak, no_margin, no_gpu_telemetry, scale,
scale_rule_not_met), for the plain answer (analysis/answer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capacity_plugins.analysis.capacity import level_words
from capacity_plugins.analysis.ttft_breakdown import ttft_reasons
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.planning import SLOConfig, VerdictConfig
from capacity_plugins.contracts.slo import LIMITS
from capacity_plugins.contracts.summary import (
    Capacity,
    ChecklistItem,
    ClassRow,
    Cost,
    Decision,
    EvidenceLevels,
    Judged,
    Knee,
    Plan,
    Setting,
    StepSummary,
    Verdict,
)

LIMIT_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "itl_ms": "ITL"}

# What each setting a reason can rest on means, for the verdict's `settings`.
SETTING_MEANINGS = {
    "verdict.min_valid_steps": "valid steps the verdict needs",
    "verdict.gpu_busy_pct": "GPU counted busy above this (%)",
    "verdict.gpu_idle_pct": "GPU counted idle below this while the SLO fails (%)",
    "verdict.gpu_low_pct": "GPU counted not saturated below this (%)",
    "verdict.gpu_hot_c": "GPU likely throttles above this temperature (°C)",
    "verdict.queue_idle_max": "server queue (requests waiting) below which nothing waits for the GPU",
    "verdict.deferred_min": "requests deferred by the server (LoRA adapters beyond --max-loras) from which the "
                            "adapters are the bottleneck",
    "verdict.kv_cache_full": "KV cache counted full at this share (0–1)",
    "verdict.peak_e2e_p99_ms": "E2E p99 limit at the forecast peak (ms)",
    "verdict.trigger_share": "share of the current capacity at which planning starts",
    "verdict.max_capacity_interval": "widest capacity interval, as a share of the capacity, a plan is sized from",
    "verdict.queue_dominant_share": "share of TTFT spent in the server queue at which queueing dominates",
    "verdict.client_remainder_max_ms": "client TTFT mean minus the server's called out above this (ms)",
    "slo.ttft_p95_ms": "TTFT limit (ms)",
    "slo.tpot_p95_ms": "TPOT limit (ms)",
    "slo.e2e_p95_ms": "E2E limit (ms)",
    "slo.itl_p95_ms": "ITL limit (ms)",
    "slo.first_visible_p95_ms": "time to first output token limit (ms)",
    "slo.tpot_visible_p95_ms": "visible TPOT limit (ms)",
    "slo.attainment": "share of requests that must meet each latency limit",
    "slo.error_rate": "highest error rate a passing step may have",
    "load.max_client_cpu_pct": "load-generator CPU counted busy at this (%)",
    "load.min_requests": "measured requests a step needs to decide anything",
}

Used = Callable[[str, Any], None]


def _ignore(_key: str, _value: Any) -> None:
    return None


class Settings:
    """The settings the reasons used, once each, in order: the verdict's `settings`."""

    def __init__(self) -> None:
        self.items: list[Setting] = []

    def __call__(self, key: str, value: Any) -> None:
        if all(x.key != key for x in self.items):
            self.items.append(Setting(key=key, value=value, meaning=SETTING_MEANINGS.get(key, "")))

    def extend(self, items: list[Setting]) -> None:
        for x in items:
            if all(y.key != x.key for y in self.items):
                self.items.append(x.model_copy())


def _fmt(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "unknown" if v is None else f"{v:.{digits}f}{unit}"


def fmt_ms(v: float | None) -> str:
    """A latency in the unit a person reads: 850 ms, 5.4 s."""
    if v is None:
        return "unknown"
    if v == float("inf"):
        return "∞ (no value)"
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def _rate(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.3g}"


def missed_limits(row: Judged, slo: SLOConfig, used: Used = _ignore) -> list[str]:
    """The SLO limits a step missed, in words ("TTFT p95 3.06 s against a 1.5 s limit"); the
    settings that set them go to `used` (with workload classes: each class's own misses, named
    by the class)."""
    if isinstance(row, StepSummary) and row.workloads:
        return [f"{name}: {miss}" for name, c in row.workloads.items() if c.requests and not c.slo_pass
                for miss in missed_limits(c, _class_slo(slo, c), used)]
    out = []
    pct = f"p{slo.attainment * 100:g}"
    for m, v in row.slo.items():
        if not v.passed:
            out.append(f"{LIMIT_NAMES.get(m, m)} {pct} is {fmt_ms(v.quantile_ms)} against a {fmt_ms(v.limit_ms)} "
                       "limit")
            used(f"slo.{m[:-3]}_p95_ms", v.limit_ms)
    err = row.error_rate
    if err is not None and err > slo.error_rate:
        out.append(f"errors are {err:.1%} against a {slo.error_rate:.1%} limit")
        used("slo.error_rate", slo.error_rate)
    if not row.ok_requests:
        out.append("no successful request")
    return out


def _class_slo(slo: SLOConfig, c: ClassRow) -> SLOConfig:
    """The SLO a class was judged by, as far as its row says (its attainment and error-rate limit)."""
    return slo.model_copy(update={"attainment": c.attainment_target, "error_rate": c.error_rate_limit})


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1] if parts else ""


def _at_peak(rows: list[StepSummary], plan: Plan, capacity: Capacity) -> tuple[StepSummary | None, float | None, bool]:
    """(the measured step closest above the per-node forecast peak, else the highest valid one;
    the forecast peak per node in req/s; whether that step reaches it)."""
    valid = sorted((r for r in rows if r.valid), key=lambda r: r.level)
    if not valid:
        return None, None, False
    peak = plan.peak_qps
    if peak:
        replicas = capacity.replicas_behind_url if capacity.replicas_behind_url is not None else 1
        per_node_peak = peak / max(plan.current_nodes or 1, 1) * replicas
        for r in valid:
            if (r.rps or 0) >= per_node_peak:
                return r, per_node_peak, True
        return valid[-1], per_node_peak, False
    return valid[-1], None, False


@dataclass
class Bottleneck:
    """Which resource a loaded step's telemetry points at, and the hints that say so."""

    kind: str
    hints: list[str]
    at_level: float | None = None
    settings: list[Setting] = field(default_factory=list)


def waiting_for_gpu(row: StepSummary) -> float:
    """Requests queued for a batch slot: the server's queue less the ones it defers (LoRA budget)."""
    return (row.server_waiting or 0.0) - (row.server_deferred or 0.0)


def bottleneck(row: StepSummary | None, vc: VerdictConfig | None = None, client_cpu_max_pct: float = 90.0,
               simulated: bool = False) -> Bottleneck:
    """Which resource the telemetry of a loaded step points at (the bottleneck hints in docs/capacity.md):
    hints in plain words, each GPU figure the row's own."""
    vc = vc or VerdictConfig()
    used = Settings()
    if row is None:
        return Bottleneck("unknown", ["no valid step"])
    gpu = "simulated GPU" if simulated else "GPU"
    at = level_words(row)
    gu, kv, temp = row.gpu_util_pct, row.kv_cache_usage_max, row.gpu_temp_max_c
    cpu, wait, deferred = row.client_cpu_max_pct, row.server_waiting, row.server_deferred
    hints: list[str] = []
    kind = "unknown"
    low = vc.gpu_low_pct
    if kv is not None and kv >= vc.kv_cache_full and (gu is None or gu < low):
        kind = "memory"
        hints.append(f"KV cache {kv:.0%} full at {at} while the {gpu} is busy only {_fmt(gu, ' %')}: memory-bound "
                     "(raw VRAM is no signal on vLLM)")
        used("verdict.kv_cache_full", vc.kv_cache_full)
        used("verdict.gpu_low_pct", low)
    if temp is not None and temp > vc.gpu_hot_c:
        hints.append(f"{gpu} at {temp:.0f} °C at {at}: thermal throttling likely")
        used("verdict.gpu_hot_c", vc.gpu_hot_c)
        kind = "thermal" if kind == "unknown" else kind
    if cpu is not None and cpu >= client_cpu_max_pct and (gu is None or gu < low):
        hints.append(f"load-generator CPU {cpu:.0f} % at {at} with the {gpu} idle: preprocessing, tokenizer or the "
                     "load generator is the limit")
        used("load.max_client_cpu_pct", client_cpu_max_pct)
        used("verdict.gpu_low_pct", low)
        kind = "cpu" if kind == "unknown" else kind
    if gu is not None and gu < low and kind == "unknown":
        kind = "feeding"
        hints.append(f"{gpu} busy only {gu:.0f} % at {at}: a feeding bottleneck (batching, preprocessing, network), "
                     "not GPU compute")
        used("verdict.gpu_low_pct", low)
    if gu is not None and gu >= vc.gpu_busy_pct:
        kind = "gpu" if kind == "unknown" else kind
        hints.append(f"{gpu} busy {gu:.0f} % at {at}: GPU compute saturated")
        used("verdict.gpu_busy_pct", vc.gpu_busy_pct)
    if kv is not None and kv >= vc.kv_cache_full and gu is not None and gu >= low:
        hints.append(f"KV cache {kv:.0%} full at {at}: preemption / queueing on cache")
        used("verdict.kv_cache_full", vc.kv_cache_full)
        kind = "kv_cache" if kind == "unknown" else kind
    if deferred is not None and deferred >= vc.deferred_min:
        # The server holds these back while it has batch slots: more GPUs would hold them back too.
        kind = "adapters" if kind in ("unknown", "feeding") else kind
        hints.append(f"{deferred:.1f} requests on average at {at} wait for their LoRA adapter to join a batch, "
                     "not for a batch slot: the server holds fewer adapters per batch than the traffic uses "
                     "(vLLM's --max-loras)")
        used("verdict.deferred_min", vc.deferred_min)
    if wait is not None and waiting_for_gpu(row) >= vc.queue_idle_max:
        hints.append(f"{waiting_for_gpu(row):.1f} requests wait in the server queue on average at {at}: they "
                     "wait for a batch slot")
        used("verdict.queue_idle_max", vc.queue_idle_max)
    if gu is None:
        hints.append("no GPU telemetry: run with the GPU agent or a DCGM scrape to tell GPU from other limits")
    if simulated and gu is not None:
        hints.append("the target was the embedded simulator: its GPU readings are simulated, not measured")
    return Bottleneck(kind, hints, row.level, used.items)


def _busy(row: StepSummary, vc: VerdictConfig) -> bool:
    return (row.gpu_util_pct or 0) > vc.gpu_busy_pct or (row.kv_cache_usage_max or 0) > vc.kv_cache_full


def decide(rows: list[StepSummary], knee: Knee, capacity: Capacity, plan: Plan, telemetry_present: bool,
           slo: SLOConfig, vc: VerdictConfig | None = None, client_cpu_max_pct: float = 90.0,
           simulated: bool = False) -> Verdict:
    vc = vc or VerdictConfig()
    gpu = "simulated GPU" if simulated else "GPU"
    valid = sorted((r for r in rows if r.valid), key=lambda r: r.level)
    passing = [r for r in valid if r.slo_pass]
    hp = passing[-1] if passing else None
    ff = next((r for r in valid if not r.slo_pass), None)
    reasons: list[str] = []
    next_steps: list[str] = []
    used = Settings()
    # The step the decision rests on: reasons and hints quote its figures (one GPU figure per step).
    focus = ff or hp

    def result(decision: Decision, rule: str) -> Verdict:
        row = focus
        bn = bottleneck(row, vc, client_cpu_max_pct, simulated)
        # Where TTFT goes holds whatever the decision: queueing dominating it, a long measuring path.
        reasons.extend(ttft_reasons(rows, row, vc, used))
        used.extend(bn.settings)
        used.extend(plan.settings)
        return Verdict(decision=decision, rule=rule, reasons=reasons, bottleneck=bn.kind, bottleneck_hints=bn.hints,
                       measure_next=next_steps, settings=used.items,
                       evidence_levels=EvidenceLevels(highest_passing=hp.level if hp else None,
                                                      first_failing=ff.level if ff else None,
                                                      decided_at=row.level if row else None))

    unknown = capacity.per_node_rps is None
    if len(valid) < vc.min_valid_steps:
        invalid = len(rows) - len(valid)
        used("verdict.min_valid_steps", vc.min_valid_steps)
        reasons.append(f"Only {len(valid)} valid step{'s' if len(valid) != 1 else ''}, and the verdict needs "
                       f"{vc.min_valid_steps}" + (f"; {invalid} step(s) decide nothing (see the load table)" if invalid else "")
                       + ": the curve is not measured.")
        if unknown and capacity.unknown_reason:
            reasons.append(f"Capacity unknown: {capacity.unknown_reason}.")
            if capacity.measure_next:  # always, with an unknown reason (capacity.py says both)
                next_steps.append(capacity.measure_next)
        min_req = next((r.min_requests for r in rows if r.min_requests), None)
        enough = f" (at least {min_req} measured requests each)" if min_req else ""
        next_steps.append(f"rerun with more load levels (e.g. 1, 2, 4, 8, 16, 32), steps long enough{enough}, "
                          "and a load generator that is not the limit")
        return result("observe", "too_few_valid_steps")

    # Latency over the SLO while the GPU idles: more GPUs would idle too (docs/capacity.md, "Verdict").
    # Requests the server defers (a LoRA adapter that cannot join the batch) do not wait for the GPU.
    if ff is not None and ff.gpu_util_pct is not None and ff.gpu_util_pct < vc.gpu_idle_pct \
            and waiting_for_gpu(ff) < vc.queue_idle_max:
        missed = missed_limits(ff, slo, used)
        used("verdict.gpu_idle_pct", vc.gpu_idle_pct)
        used("verdict.queue_idle_max", vc.queue_idle_max)
        focus = ff
        held = ff.server_deferred is not None and ff.server_deferred >= vc.deferred_min
        waits = (f"{ff.server_deferred:.1f} requests wait for their LoRA adapter to join a batch, "
                 f"{waiting_for_gpu(ff):.1f} for a batch slot" if held
                 else f"{_fmt(ff.server_waiting, '', 1)} requests wait in the server queue")
        reasons.append(f"The GPU is not the bottleneck: at {level_words(ff)} the SLO fails ({_and(missed) or 'missed'}) "
                       f"while the {gpu} is busy only {ff.gpu_util_pct:.0f} % and {waits}.")
        if unknown and capacity.unknown_reason:
            reasons.append(f"Capacity unknown: {capacity.unknown_reason}.")
        if held:
            next_steps.append("let one batch hold more adapters (vLLM's --max-loras) or send fewer adapters to each "
                              "node, then re-measure before adding GPUs")
        next_steps.append("check batching, caching, tokenizer/preprocessing, client and network before adding GPUs")
        if unknown and capacity.measure_next:
            next_steps.append(capacity.measure_next)
        return result("dont_scale_yet", "gpu_not_the_bottleneck")

    nodes, cur = plan.nodes, plan.current_nodes
    share = plan.peak_share_of_current_capacity
    per_node = capacity.per_node_rps
    if per_node is None or per_node == 0.0:
        ci = capacity.per_node_rps_ci
        capacity_rule = "capacity_unknown" if per_node is None else "capacity_zero_within_noise" if ci and ci[1] \
            else "infeasible"
        if per_node is None:
            why = capacity.unknown_reason or "the capacity under the SLO was not measured"
            reasons.append(f"Capacity unknown: {why}.")
            next_steps.append(capacity.measure_next or "rerun the sweep")
        elif ci and ci[1]:
            reasons.append(f"The SLO fails with one request at a time as measured, but within the noise it may hold "
                           f"(capacity up to {ci[1]:.3g} req/s): not enough data to say.")
            next_steps.append("measure longer steps at 1 user")
        else:
            low = focus = valid[0]
            missed = missed_limits(low, slo, used)
            reasons.append(f"No capacity under the SLO: it fails already with one request at a time "
                           f"({_and(missed) or 'missed'} at {level_words(low)}), so no number of nodes meets it.")
            next_steps.append("fix single-request latency (model size, max_tokens, quantisation) or relax the SLO, "
                              "then re-measure")
        return result("observe", capacity_rule)
    if plan.peak_qps is None:
        reasons.append("No forecast peak given: the capacity is measured, but there is nothing to size it against.")
        next_steps.append("give --peak-qps (the p99 of per-minute traffic, or peak-hour mean × peak factor)")
        return result("observe", "no_peak")
    if plan.refused:
        reasons.append(f"The plan gives no fleet size: {plan.refused}.")
        if capacity.requests_to_show:
            every = "every workload class's step" if any(r.workloads for r in rows) else "every step"
            next_steps.append(f"lengthen the steps until {every} holds at least {capacity.requests_to_show} "
                              "successful requests: fewer cannot show the SLO met, however fast they are")
        next_steps.append("repeat the run or lengthen its steps until the capacity interval is narrow enough")
        return result("observe", "plan_refused")
    peak = plan.peak_qps
    span = plan.nodes_interval
    span_note = f" ({span[0]}–{span[1]} within the capacity interval)" if span and span[0] != span[1] else ""
    spare = f", + {plan.redundancy} spare" if plan.redundancy else ""
    needs = (f"the forecast peak of {peak:g} req/s (× {plan.safety_factor:g} safety{spare}) needs "
             f"{nodes} node{'s' if nodes != 1 else ''}{span_note}")
    if nodes is not None and cur is not None and nodes <= cur:
        reasons.append(f"The fleet carries the peak: {needs}, and you have {cur}.")
        return result("dont_scale_yet", "fleet_carries_the_peak")
    if share is not None and cur is not None and vc.trigger_share <= share <= 1.0:
        used("verdict.trigger_share", vc.trigger_share)
        reasons.append(f"The forecast peak of {peak:g} req/s is {share:.0%} of what the {cur} current "
                       f"node{'s' if cur != 1 else ''} carry: above the {vc.trigger_share:.0%} at which planning "
                       "starts, but not over — no margin.")
        next_steps.append(f"watch real traffic for a week; rerun when it stays above {vc.trigger_share:.0%} of capacity")
        return result("observe", "no_margin")
    have = f"; you have {cur}" if cur is not None else ""
    plan_words = needs[0].upper() + needs[1:] + have
    loaded = focus
    if not telemetry_present or (loaded is not None and loaded.gpu_util_pct is None):
        reasons.append(plan_words + ", but there is no GPU telemetry to show the GPU is the limit.")
        next_steps.append("re-run with GPU telemetry (gpu-agent / DCGM) and server metrics (queue, KV cache)")
        return result("observe", "no_gpu_telemetry")
    busy = [r for r in (ff, hp) if r is not None and _busy(r, vc)]
    at_peak, peak_per_node, reached = _at_peak(rows, plan, capacity)
    over, latency_words = _latency_at_peak(at_peak, slo, vc, used)
    need_more = cur is None or (nodes is not None and nodes > cur)
    carries = _carries(per_node, cur, share, peak)
    if busy and over and need_more:
        focus = g = busy[0]
        used("verdict.gpu_busy_pct", vc.gpu_busy_pct)
        what, figures = _busy_words(g, vc, gpu, used)
        miss = missed_limits(g, slo, used) if not g.slo_pass else []
        where = f", where {_and(miss)}" if miss else ", where the SLO still holds"
        reasons.append(f"{what}: {figures} at {level_words(g)}{where}.")
        reasons.append(carries)
        reasons.append(_peak_words(at_peak, g, peak_per_node, reached, latency_words))
        if span_note:  # the plain answer above says the node count; only its range is news here
            reasons.append(plan_words + ".")
        return result("scale", "scale")
    loaded = focus
    gu = loaded.gpu_util_pct if loaded else None
    used("verdict.gpu_busy_pct", vc.gpu_busy_pct)
    busy_words = (f"the {gpu} is busy {_fmt(gu, ' %')} at {level_words(loaded) if loaded else 'no valid step'}, "
                  + ("above" if loaded is not None and _busy(loaded, vc) else "not above") + f" the {vc.gpu_busy_pct:g} % counted busy")
    peak_words = _peak_words(at_peak, None, peak_per_node, reached, latency_words)
    reasons.append(f"{plan_words}, but the scale rule is not met: {busy_words}.")
    reasons.append(peak_words)
    next_steps.append("find what limits throughput before buying GPUs (see bottleneck hints)")
    return result("observe", "scale_rule_not_met")


def _busy_words(g: StepSummary, vc: VerdictConfig, gpu: str, used: Used) -> tuple[str, str]:
    """('The GPU is the limit', 'simulated GPU busy 96 %') for the busy step a scale rests on."""
    gu, kv = g.gpu_util_pct, g.kv_cache_usage_max
    parts = []
    if gu is not None and gu > vc.gpu_busy_pct:
        parts.append(f"{gpu} busy {gu:.0f} %")
    if kv is not None and kv > vc.kv_cache_full:
        parts.append(f"KV cache {kv:.0%} full")
        used("verdict.kv_cache_full", vc.kv_cache_full)
    what = "The GPU is the limit" if gu is not None and gu > vc.gpu_busy_pct else "GPU memory (the KV cache) is the limit"
    return what, " and ".join(parts)


def _carries(per_node: float, cur: int | None, share: float | None, peak: float) -> str:
    """'One node carries 8.5 req/s; the forecast peak of 20 req/s is 2.4× that.'"""
    n = cur if cur else 1
    who = "One node carries" if n == 1 else f"{n} nodes carry"
    times = share if share is not None else peak / (per_node * n)
    return f"{who} {per_node * n:.3g} req/s; the forecast peak of {peak:g} req/s is {times:.2g}× that."


def _peak_words(at_peak: StepSummary | None, said: StepSummary | None, peak_per_node: float | None,
                reached: bool, latency: str) -> str:
    """The tested level that stands for the forecast peak, named apart from the peak itself."""
    if at_peak is None:
        return "No valid step stands for the forecast peak."
    at = level_words(at_peak)
    pn = f"{peak_per_node:.3g} req/s per node" if peak_per_node is not None else "the forecast peak"
    if reached:
        where = f"{at} ({_rate(at_peak.rps)} req/s) is the first tested level that carries the forecast peak ({pn})"
    else:
        where = (f"No tested level carries the forecast peak ({pn}); the highest, {at}, carried "
                 f"{_rate(at_peak.rps)} req/s")
    if said is not None and said is at_peak and not latency.startswith("E2E"):
        return where + "."
    return f"{where}: {latency}."


def _latency_at_peak(at_peak: StepSummary | None, slo: SLOConfig, vc: VerdictConfig, used: Used) -> tuple[bool, str]:
    """Is latency over the limit at the step that stands for the forecast peak, and the words that say so."""
    if at_peak is None:
        return False, "no step stands for the forecast peak"
    if vc.peak_e2e_p99_ms is not None:
        used("verdict.peak_e2e_p99_ms", vc.peak_e2e_p99_ms)
        e2e = at_peak.e2e_p99_ms
        over = e2e is not None and e2e > vc.peak_e2e_p99_ms
        return over, (f"E2E p99 {fmt_ms(e2e)} is {'over' if over else 'within'} the {fmt_ms(vc.peak_e2e_p99_ms)} "
                      "limit at the forecast peak")
    if at_peak.slo_pass:
        return False, "the SLO holds there"
    return True, _and(missed_limits(at_peak, slo, used))


def checklists(rows: list[StepSummary], cap: Capacity, cost: Cost, plan: Plan, run_meta: Meta,
               telemetry_series: set[str], slo: SLOConfig, vc: VerdictConfig | None = None) -> list[ChecklistItem]:
    """The 7-item scale review and the 6 preconditions (docs/capacity.md), filled from the data."""
    valid = [r for r in rows if r.valid]
    has_gpu = "gpu_util_pct" in telemetry_series or "sm_active" in telemetry_series
    has_server = bool({"server_waiting", "server_running", "kv_cache_usage"} & telemetry_series)
    recorded = {"versions": run_meta.versions, "model": run_meta.model, "server": run_meta.server,
                "target": run_meta.target}
    versions = [k for k, v in recorded.items() if v]
    min_valid = (vc or VerdictConfig()).min_valid_steps
    items: list[ChecklistItem] = []

    def add(id_: str, text: str, status: Any, evidence: str) -> None:
        items.append(ChecklistItem(id=id_, text=text, status=status, evidence=evidence))

    # --- the scale review (docs/capacity.md, "Checklists") (all seven must hold before scaling)
    add("review.1_quality_baseline", "Model quality baseline is quantified and meets the business threshold",
        "needs_human", "load tests do not measure answer quality; attach the evaluation-set result")
    lat_ok = bool(valid) and all(r.ttft_p95_ms is not None for r in valid)
    add("review.2_load_test_complete", "Load-test data is complete: per-node throughput, latency distribution, resource use",
        "pass" if len(valid) >= min_valid and lat_ok and has_gpu else "fail",
        f"{len(valid)} valid step(s), latency percentiles {'present' if lat_ok else 'missing'}, "
        f"GPU telemetry {'present' if has_gpu else 'missing'}")
    add("review.3_traffic_forecast", "Current vs. post-scale traffic is backed by data",
        "needs_human" if plan.peak_qps else "fail",
        f"forecast peak {plan.peak_qps:g} qps given; its source must be confirmed" if plan.peak_qps
        else "no forecast peak given")
    add("review.4_versions_locked", "Code, inference parameters and dependency versions are locked and recorded",
        "pass" if versions else "fail",
        f"meta.json records {', '.join(versions)}" if versions else "meta.json records no versions / model / server")
    add("review.5_monitoring", "Monitoring and alerts cover GPU, container, application and business",
        "needs_human" if has_gpu and has_server else "fail",
        f"this run captured GPU telemetry: {has_gpu}, server metrics: {has_server}; alert rules need a person")
    add("review.6_cost_model", "Cost model updated; unit cost after scaling is acceptable",
        "needs_human" if cost.per_1k_requests_usd is not None else "fail",
        f"{cost.per_1k_requests_usd:.4g} USD per 1k requests at capacity; acceptability needs a person"
        if cost.per_1k_requests_usd is not None else "no gpu_hour_usd: cost not computed")
    add("review.7_compliance", "Data compliance and authorisation checks are done",
        "needs_human", "not observable from a load test")

    # --- the six preconditions (docs/capacity.md, "Checklists")
    low = min(valid, key=lambda r: r.level) if valid else None
    stable = low is not None and (low.error_rate or 0) <= slo.error_rate
    add("pre.1_single_flow_stable", "The single-request flow is stable (same input → acceptable output)",
        "needs_human" if stable else "fail",
        (f"error rate {low.error_rate:.2%} at the lowest level {low.level:g}; output quality needs a person"
         if low else "no valid step"))
    limits = [k for _m, k in (*LIMITS, ("itl_ms", "itl_p95_ms")) if getattr(slo, k) is not None]
    add("pre.2_metrics_defined", "Evaluation metrics are defined (good vs bad result)",
        "pass" if limits else "fail", f"SLO limits: {', '.join(limits) or 'none'}; attainment {slo.attainment:g}")
    incomplete = bool(run_meta.incomplete)
    passing_err = [r.error_rate or 0 for r in valid if r.slo_pass]
    add("pre.3_batch_runs", "Batch / continuous runs do not break; failures are retried",
        "fail" if incomplete or not passing_err else "pass",
        ("run was interrupted" if incomplete else
         f"max error rate in passing steps {max(passing_err):.2%}" if passing_err else "no passing step"))
    add("pre.4_resource_bounds", "Resource bounds are known (how much load this configuration carries)",
        "pass" if cap.method == "interpolated" else "fail",
        f"capacity {cap.per_node_rps or 0:.3g} rps/node, bracket {cap.last_pass_level}–{cap.first_fail_level}"
        if cap.method == "interpolated" else f"capacity not bracketed ({cap.method})")
    add("pre.5_cost_per_effective_output", "Cost per effective output is computed and within budget",
        "needs_human" if cost.per_effective_output_usd is not None else "fail",
        f"{cost.per_effective_output_usd:.4g} USD per SLO-meeting output; the budget needs a person"
        if cost.per_effective_output_usd is not None else "not computed (no gpu_hour_usd or no passing step)")
    add("pre.6_versions_rollback", "Model weights, code and dependency versions can be rolled back",
        "needs_human" if run_meta.model else "fail",
        f"model {run_meta.model!s} recorded; rollback needs a person" if run_meta.model else "model not recorded in meta.json")
    return items
