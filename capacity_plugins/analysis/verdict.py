"""Verdict (scale / dont_scale_yet / observe), bottleneck hints and the checklists of docs/capacity.md.

Rules (docs/capacity.md, "Verdict"), in order; every threshold comes from the scenario's `slo`
and `verdict` sections (or flags) and each reason names the key it used:
- fewer than `verdict.min_valid_steps` valid steps → observe (the curve is not measured);
- latency over the SLO while GPU util < `verdict.gpu_idle_pct` and the server queue <
  `verdict.queue_idle_max` → dont_scale_yet: the bottleneck is not the GPU;
- no capacity, no forecast, or a plan that refused → observe;
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
"""

from __future__ import annotations

from typing import Any

from capacity_plugins.analysis.ttft_breakdown import ttft_reasons
from capacity_plugins.contracts.planning import SLOConfig, VerdictConfig

LIMIT_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "itl_ms": "ITL"}


def _fmt(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "unknown" if v is None else f"{v:.{digits}f}{unit}"


def fmt_ms(v: float | None) -> str:
    """A latency in the unit a person reads: 850 ms, 5.4 s."""
    if v is None:
        return "unknown"
    if v == float("inf"):
        return "∞ (no value)"
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def missed_limits(row: dict[str, Any], slo: SLOConfig) -> list[str]:
    """The SLO limits a step missed, each with the key that set it (with workload classes: each
    class's own misses, named by the class)."""
    if row.get("workloads"):
        return [f"{name}: {miss}" for name, c in row["workloads"].items() if c["requests"] and not c["slo_pass"]
                for miss in missed_limits(c, slo.model_copy(update={"attainment": c["attainment_target"],
                                                                    "error_rate": c["error_rate_limit"]}))]
    out = []
    pct = f"P{slo.attainment * 100:g}"
    for m, v in row.get("slo", {}).items():
        if not v["pass"]:
            out.append(f"{LIMIT_NAMES.get(m, m)} {pct} {fmt_ms(v['quantile_ms'])} > {fmt_ms(v['limit_ms'])} "
                       f"(slo.{m[:-3]}_p95_ms)")
    err = row.get("error_rate")
    if err is not None and err > slo.error_rate:
        out.append(f"errors {err:.1%} > {slo.error_rate:.1%} (slo.error_rate)")
    if not row.get("ok_requests"):
        out.append("no successful request")
    return out


def _at_peak(rows: list[dict[str, Any]], plan: dict[str, Any], capacity: dict[str, Any]) -> dict[str, Any] | None:
    """The measured step closest above the per-node forecast peak (else the highest valid one)."""
    valid = sorted((r for r in rows if r["valid"]), key=lambda r: r["level"])
    if not valid:
        return None
    peak = plan.get("peak_qps")
    if peak:
        per_node_peak = peak / max(plan.get("current_nodes") or 1, 1) * capacity.get("replicas_behind_url", 1)
        for r in valid:
            if (r["rps"] or 0) >= per_node_peak:
                return r
    return valid[-1]


def bottleneck(row: dict[str, Any] | None, vc: VerdictConfig | None = None, client_cpu_max_pct: float = 90.0,
               simulated: bool = False) -> dict[str, Any]:
    """Which resource the telemetry of a loaded step points at (the bottleneck hints in docs/capacity.md)."""
    vc = vc or VerdictConfig()
    if row is None:
        return {"kind": "unknown", "hints": ["no valid step"]}
    gpu = "simulated GPU" if simulated else "GPU"
    gu, kv, temp = row.get("gpu_util_pct"), row.get("kv_cache_usage_max"), row.get("gpu_temp_max_c")
    cpu, wait = row.get("client_cpu_max_pct"), row.get("server_waiting")
    hints: list[str] = []
    kind = "unknown"
    low = vc.gpu_low_pct
    if kv is not None and kv >= vc.kv_cache_full and (gu is None or gu < low):
        kind = "memory"
        hints.append(f"KV cache {kv:.0%} full (≥ {vc.kv_cache_full:.0%}, verdict.kv_cache_full) with {gpu} util "
                     f"{_fmt(gu, ' %')}: memory-bound (raw VRAM is no signal on vLLM)")
    if temp is not None and temp > vc.gpu_hot_c:
        hints.append(f"{gpu} at {temp:.0f} °C (> {vc.gpu_hot_c:g} °C, verdict.gpu_hot_c): thermal throttling likely")
        kind = "thermal" if kind == "unknown" else kind
    if cpu is not None and cpu >= client_cpu_max_pct and (gu is None or gu < low):
        hints.append(f"client CPU {cpu:.0f} % (≥ {client_cpu_max_pct:g} %, load.max_client_cpu_pct) with the {gpu} idle: "
                     "preprocessing / tokenizer / load generator")
        kind = "cpu" if kind == "unknown" else kind
    if gu is not None and gu < low and kind == "unknown":
        kind = "feeding"
        hints.append(f"{gpu} util {gu:.0f} % < {low:g} % (verdict.gpu_low_pct): feeding bottleneck "
                     "(batching, preprocessing, network), not GPU compute")
    if gu is not None and gu >= vc.gpu_busy_pct:
        kind = "gpu" if kind == "unknown" else kind
        hints.append(f"{gpu} util {gu:.0f} % ≥ {vc.gpu_busy_pct:g} % (verdict.gpu_busy_pct): GPU compute saturated")
    if kv is not None and kv >= vc.kv_cache_full and gu is not None and gu >= low:
        hints.append(f"KV cache {kv:.0%} full: preemption / queueing on cache")
        kind = "kv_cache" if kind == "unknown" else kind
    if wait is not None and wait >= vc.queue_idle_max:
        hints.append(f"server queue {wait:.1f} on average (≥ {vc.queue_idle_max:g}, verdict.queue_idle_max): "
                     "requests wait for a batch slot")
    if gu is None:
        hints.append("no GPU telemetry: run with the GPU agent or a DCGM scrape to tell GPU from other limits")
    if simulated and gu is not None:
        hints.append("the target was the embedded simulator: its GPU readings are simulated, not measured")
    return {"kind": kind, "hints": hints, "at_level": row["level"]}


def decide(rows, knee, capacity, plan, telemetry_present: bool, slo: SLOConfig, vc: VerdictConfig | None = None,
           client_cpu_max_pct: float = 90.0, simulated: bool = False) -> dict[str, Any]:
    vc = vc or VerdictConfig()
    gpu = "simulated GPU" if simulated else "GPU"
    valid = sorted((r for r in rows if r["valid"]), key=lambda r: r["level"])
    passing = [r for r in valid if r["slo_pass"]]
    hp = passing[-1] if passing else None
    ff = next((r for r in valid if not r["slo_pass"]), None)
    reasons: list[str] = []
    next_steps: list[str] = []
    loaded = ff or hp
    bn = bottleneck(loaded, vc, client_cpu_max_pct, simulated)

    def result(decision: str) -> dict[str, Any]:
        # Where TTFT goes holds whatever the decision: queueing dominating it, a long measuring path.
        reasons.extend(ttft_reasons(rows, loaded, vc))
        return {"decision": decision, "reasons": reasons, "bottleneck": bn["kind"], "bottleneck_hints": bn["hints"],
                "measure_next": next_steps,
                "evidence_levels": {"highest_passing": hp["level"] if hp else None,
                                    "first_failing": ff["level"] if ff else None}}

    if len(valid) < vc.min_valid_steps:
        invalid = len(rows) - len(valid)
        reasons.append(f"only {len(valid)} valid step(s) (need ≥ {vc.min_valid_steps}, verdict.min_valid_steps)"
                       + (f"; {invalid} step(s) decide nothing (see the load table)" if invalid else "")
                       + " — the curve is not measured")
        next_steps.append("re-run with more load levels (e.g. 1, 2, 4, 8, 16, 32), steps long enough for "
                          "load.min_requests, and a load generator that is not the limit")
        return result("observe")

    # Latency over the SLO while the GPU idles: more GPUs would idle too (docs/capacity.md, "Verdict").
    if ff is not None and ff.get("gpu_util_pct") is not None and ff["gpu_util_pct"] < vc.gpu_idle_pct \
            and (ff.get("server_waiting") or 0) < vc.queue_idle_max:
        missed = missed_limits(ff, slo)
        reasons.append(f"the SLO fails at level {ff['level']:g} ({'; '.join(missed) or 'missed'}) while {gpu} util is "
                       f"{ff['gpu_util_pct']:.0f} % (< {vc.gpu_idle_pct:g} %, verdict.gpu_idle_pct) and the server queue "
                       f"{_fmt(ff.get('server_waiting'), '', 1)} (< {vc.queue_idle_max:g}, verdict.queue_idle_max): "
                       "the GPU is not the bottleneck")
        next_steps.append("check batching, caching, tokenizer/preprocessing, client and network before adding GPUs")
        return result("dont_scale_yet")

    nodes, cur = plan.get("nodes"), plan.get("current_nodes")
    share = plan.get("peak_share_of_current_capacity")
    if capacity.get("per_node_rps") in (None, 0.0):
        ci = capacity.get("per_node_rps_ci")
        if capacity.get("per_node_rps") is None:
            reasons.append("capacity under the SLO unknown")
        elif ci and ci[1]:
            reasons.append(f"the SLO fails at the lowest load as measured, but within the noise it may hold "
                           f"(capacity up to {ci[1]:.3g} rps): not enough data to say")
        else:
            reasons.append("no capacity under the SLO (it fails already at the lowest load)")
        next_steps.append("fix single-request latency (model size, max_tokens, quantisation) or relax the SLO, then re-measure")
        return result("observe")
    if plan.get("peak_qps") is None:
        reasons.append("no forecast peak given: the capacity is measured but there is nothing to size against")
        next_steps.append("give --peak-qps (the p99 of per-minute traffic, or peak-hour mean × peak factor)")
        return result("observe")
    if plan.get("refused"):
        reasons.append(f"no fleet size: {plan['refused']}")
        next_steps.append("repeat the run or lengthen its steps until the capacity interval is narrow enough")
        return result("observe")
    span = plan.get("nodes_interval")
    span_note = f" ({span[0]}–{span[1]} within the capacity interval)" if span and span[0] != span[1] else ""
    if nodes is not None and cur is not None and nodes <= cur:
        reasons.append(f"{nodes} node(s){span_note} needed for peak {plan['peak_qps']:g} qps × SF {plan['safety_factor']:g}"
                       f" (+{plan['redundancy']} redundancy) ≤ {cur} current: the fleet carries the peak")
        return result("dont_scale_yet")
    if share is not None and cur is not None and vc.trigger_share <= share <= 1.0:
        reasons.append(f"forecast peak is {share:.0%} of current capacity (between {vc.trigger_share:.0%}, "
                       "verdict.trigger_share, and 100 %): no margin, but not over")
        next_steps.append(f"watch real traffic for a week; rerun when it stays above {vc.trigger_share:.0%} of capacity")
        return result("observe")
    plan_words = f"plan says {nodes} node(s){span_note}" + (f" vs {cur} current" if cur is not None else "")
    if not telemetry_present or (loaded is not None and loaded.get("gpu_util_pct") is None):
        reasons.append(plan_words + ", but there is no GPU telemetry to show the GPU is the limit")
        next_steps.append("re-run with GPU telemetry (gpu-agent / DCGM) and server metrics (queue, KV cache)")
        return result("observe")
    gpu_busy = [r for r in (hp, ff) if r is not None and ((r.get("gpu_util_pct") or 0) > vc.gpu_busy_pct
                                                          or (r.get("kv_cache_usage_max") or 0) > vc.kv_cache_full)]
    at_peak = _at_peak(rows, plan, capacity)
    over, latency_words = _latency_at_peak(at_peak, slo, vc)
    need_more = cur is None or (nodes is not None and nodes > cur)
    if gpu_busy and over and need_more:
        g = gpu_busy[0]
        kv = g.get("kv_cache_usage_max")
        reasons.append(f"{gpu} util {_fmt(g.get('gpu_util_pct'), ' %')} (> {vc.gpu_busy_pct:g} %, verdict.gpu_busy_pct) / "
                       f"KV cache {_fmt(kv * 100 if kv is not None else None, ' %')} at level {g['level']:g}, "
                       + latency_words)
        reasons.append(plan_words)
        return result("scale")
    hot = max((r for r in (hp, ff) if r is not None), key=lambda r: r.get("gpu_util_pct") or 0)
    busy_words = (f"{gpu} util {_fmt(hot.get('gpu_util_pct'), ' %')} {'>' if gpu_busy else '≤'} {vc.gpu_busy_pct:g} % "
                  f"(verdict.gpu_busy_pct)")
    reasons.append(plan_words + f", but the scale rule is not met ({busy_words}; {latency_words})")
    next_steps.append("find what limits throughput before buying GPUs (see bottleneck hints)")
    return result("observe")


def _latency_at_peak(at_peak: dict[str, Any] | None, slo: SLOConfig, vc: VerdictConfig) -> tuple[bool, str]:
    """Is latency over the limit at the forecast peak, and the words that say so."""
    if at_peak is None:
        return False, "no step at the forecast peak"
    where = f"at the forecast peak (level {at_peak['level']:g}, {_fmt(at_peak.get('rps'), ' rps', 1)})"
    if vc.peak_e2e_p99_ms is not None:
        e2e = at_peak.get("e2e_p99_ms")
        over = e2e is not None and e2e > vc.peak_e2e_p99_ms
        sign = ">" if over else "≤"
        return over, f"E2E P99 {fmt_ms(e2e)} {sign} {fmt_ms(vc.peak_e2e_p99_ms)} (verdict.peak_e2e_p99_ms) {where}"
    if at_peak["slo_pass"]:
        return False, f"the SLO holds {where}"
    return True, f"the SLO fails {where}: " + "; ".join(missed_limits(at_peak, slo))


def checklists(summary: dict[str, Any], run_meta: dict[str, Any], telemetry_series: set[str], slo,
               vc: VerdictConfig | None = None) -> list[dict[str, Any]]:
    """The 7-item scale review and the 6 preconditions (docs/capacity.md), filled from the data."""
    rows = summary["steps"]
    valid = [r for r in rows if r["valid"]]
    cap, cost, plan = summary["capacity"], summary["cost"], summary["plan"]
    has_gpu = "gpu_util_pct" in telemetry_series or "sm_active" in telemetry_series
    has_server = bool({"server_waiting", "server_running", "kv_cache_usage"} & telemetry_series)
    versions = {k: run_meta.get(k) for k in ("versions", "model", "server", "target") if run_meta.get(k)}
    min_valid = (vc or VerdictConfig()).min_valid_steps
    items: list[dict[str, Any]] = []

    def add(id_: str, text: str, status: str, evidence: str) -> None:
        items.append({"id": id_, "text": text, "status": status, "evidence": evidence})

    # --- the scale review (docs/capacity.md, "Checklists") (all seven must hold before scaling)
    add("review.1_quality_baseline", "Model quality baseline is quantified and meets the business threshold",
        "needs_human", "load tests do not measure answer quality; attach the evaluation-set result")
    lat_ok = bool(valid) and all(r.get("ttft_p95_ms") is not None for r in valid)
    add("review.2_load_test_complete", "Load-test data is complete: per-node throughput, latency distribution, resource use",
        "pass" if len(valid) >= min_valid and lat_ok and has_gpu else "fail",
        f"{len(valid)} valid step(s), latency percentiles {'present' if lat_ok else 'missing'}, "
        f"GPU telemetry {'present' if has_gpu else 'missing'}")
    add("review.3_traffic_forecast", "Current vs. post-scale traffic is backed by data",
        "needs_human" if plan.get("peak_qps") else "fail",
        f"forecast peak {plan['peak_qps']:g} qps given; its source must be confirmed" if plan.get("peak_qps")
        else "no forecast peak given")
    add("review.4_versions_locked", "Code, inference parameters and dependency versions are locked and recorded",
        "pass" if versions else "fail",
        f"meta.json records {', '.join(versions)}" if versions else "meta.json records no versions / model / server")
    add("review.5_monitoring", "Monitoring and alerts cover GPU, container, application and business",
        "needs_human" if has_gpu and has_server else "fail",
        f"this run captured GPU telemetry: {has_gpu}, server metrics: {has_server}; alert rules need a person")
    add("review.6_cost_model", "Cost model updated; unit cost after scaling is acceptable",
        "needs_human" if cost.get("per_1k_requests_usd") is not None else "fail",
        f"{cost['per_1k_requests_usd']:.4g} USD per 1k requests at capacity; acceptability needs a person"
        if cost.get("per_1k_requests_usd") is not None else "no gpu_hour_usd: cost not computed")
    add("review.7_compliance", "Data compliance and authorisation checks are done",
        "needs_human", "not observable from a load test")

    # --- the six preconditions (docs/capacity.md, "Checklists")
    low = min(valid, key=lambda r: r["level"]) if valid else None
    stable = low is not None and (low["error_rate"] or 0) <= slo.error_rate
    add("pre.1_single_flow_stable", "The single-request flow is stable (same input → acceptable output)",
        "needs_human" if stable else "fail",
        (f"error rate {low['error_rate']:.2%} at the lowest level {low['level']:g}; output quality needs a person"
         if low else "no valid step"))
    limits = [k for k in ("ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms", "itl_p95_ms") if getattr(slo, k) is not None]
    add("pre.2_metrics_defined", "Evaluation metrics are defined (good vs bad result)",
        "pass" if limits else "fail", f"SLO limits: {', '.join(limits) or 'none'}; attainment {slo.attainment:g}")
    incomplete = bool(run_meta.get("incomplete"))
    passing_err = [r["error_rate"] or 0 for r in valid if r["slo_pass"]]
    add("pre.3_batch_runs", "Batch / continuous runs do not break; failures are retried",
        "fail" if incomplete or not passing_err else "pass",
        ("run was interrupted" if incomplete else
         f"max error rate in passing steps {max(passing_err):.2%}" if passing_err else "no passing step"))
    add("pre.4_resource_bounds", "Resource bounds are known (how much load this configuration carries)",
        "pass" if cap.get("method") == "interpolated" else "fail",
        f"capacity {cap.get('per_node_rps') or 0:.3g} rps/node, bracket {cap.get('last_pass_level')}–{cap.get('first_fail_level')}"
        if cap.get("method") == "interpolated" else f"capacity not bracketed ({cap.get('method')})")
    add("pre.5_cost_per_effective_output", "Cost per effective output is computed and within budget",
        "needs_human" if cost.get("per_effective_output_usd") is not None else "fail",
        f"{cost['per_effective_output_usd']:.4g} USD per SLO-meeting output; the budget needs a person"
        if cost.get("per_effective_output_usd") is not None else "not computed (no gpu_hour_usd or no passing step)")
    add("pre.6_versions_rollback", "Model weights, code and dependency versions can be rolled back",
        "needs_human" if run_meta.get("model") else "fail",
        f"model {run_meta.get('model')!s} recorded; rollback needs a person" if run_meta.get("model") else "model not recorded in meta.json")
    return items
