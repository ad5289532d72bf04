"""Verdict (scale / dont_scale_yet / observe), bottleneck hints and the checklists of docs/capacity.md.

Rules (docs/capacity.md), each reported with its evidence:
- nodes needed <= current_nodes → dont_scale_yet (the fleet carries the peak);
- forecast peak between 70 % and 100 % of current capacity → observe;
- GPU util < 30 % and server queue < 5 while latency is over the SLO → dont_scale_yet: the
  bottleneck is not the GPU (batching, cache, client, network) — fix that first;
- GPU > 85 % (or KV cache > 90 %) and E2E P99 > 2 s at the forecast peak, nodes needed > current
  → scale;
- too few valid steps, missing telemetry, no forecast → observe, with what to measure next.
"""

from __future__ import annotations

from typing import Any

MIN_VALID_STEPS = 3


def _fmt(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "unknown" if v is None else f"{v:.{digits}f}{unit}"


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


def bottleneck(row: dict[str, Any] | None) -> dict[str, Any]:
    """Which resource the telemetry of a loaded step points at (the bottleneck hints in docs/capacity.md)."""
    if row is None:
        return {"kind": "unknown", "hints": ["no valid step"]}
    gu, kv, temp = row.get("gpu_util_pct"), row.get("kv_cache_usage_max"), row.get("gpu_temp_max_c")
    cpu, wait = row.get("client_cpu_max_pct"), row.get("server_waiting")
    hints: list[str] = []
    kind = "unknown"
    if kv is not None and kv >= 0.9 and (gu is None or gu < 50):
        kind = "memory"
        hints.append(f"KV cache {kv:.0%} full with GPU util {_fmt(gu, ' %')}: memory-bound (raw VRAM is no signal on vLLM)")
    if temp is not None and temp > 85:
        hints.append(f"GPU at {temp:.0f} °C: thermal throttling likely")
        kind = "thermal" if kind == "unknown" else kind
    if cpu is not None and cpu >= 90 and (gu is None or gu < 50):
        hints.append(f"client CPU {cpu:.0f} % with the GPU idle: preprocessing / tokenizer / load generator")
        kind = "cpu" if kind == "unknown" else kind
    if gu is not None and gu < 50 and kind == "unknown":
        kind = "feeding"
        hints.append(f"GPU util {gu:.0f} % < 50 %: feeding bottleneck (batching, preprocessing, network), not GPU compute")
    if gu is not None and gu >= 85:
        kind = "gpu" if kind == "unknown" else kind
        hints.append(f"GPU util {gu:.0f} % ≥ 85 %: GPU compute saturated")
    if kv is not None and kv >= 0.9 and gu is not None and gu >= 50:
        hints.append(f"KV cache {kv:.0%} full: preemption / queueing on cache")
        kind = "kv_cache" if kind == "unknown" else kind
    if wait is not None and wait >= 5:
        hints.append(f"server queue {wait:.1f} on average: requests wait for a batch slot")
    if gu is None:
        hints.append("no GPU telemetry: run with the GPU agent or a DCGM scrape to tell GPU from other limits")
    return {"kind": kind, "hints": hints, "at_level": row["level"]}


def decide(rows, knee, capacity, plan, telemetry_present: bool, slo) -> dict[str, Any]:
    valid = sorted((r for r in rows if r["valid"]), key=lambda r: r["level"])
    passing = [r for r in valid if r["slo_pass"]]
    hp = passing[-1] if passing else None
    ff = next((r for r in valid if not r["slo_pass"]), None)
    reasons: list[str] = []
    next_steps: list[str] = []
    loaded = ff or hp
    bn = bottleneck(loaded)

    def result(decision: str) -> dict[str, Any]:
        return {"decision": decision, "reasons": reasons, "bottleneck": bn["kind"], "bottleneck_hints": bn["hints"],
                "measure_next": next_steps,
                "evidence_levels": {"highest_passing": hp["level"] if hp else None,
                                    "first_failing": ff["level"] if ff else None}}

    if len(valid) < MIN_VALID_STEPS:
        reasons.append(f"only {len(valid)} valid step(s) (need ≥ {MIN_VALID_STEPS}) — the curve is not measured")
        next_steps.append("re-run with more load levels (e.g. 1, 2, 4, 8, 16, 32) and a load generator that is not the limit")
        return result("observe")

    # Latency over the SLO while the GPU idles: more GPUs would idle too (docs/capacity.md, "The verdict").
    if ff is not None and ff.get("gpu_util_pct") is not None and ff["gpu_util_pct"] < 30 and (ff.get("server_waiting") or 0) < 5:
        reasons.append(f"latency misses the SLO at level {ff['level']:g} while GPU util is {ff['gpu_util_pct']:.0f} % "
                       f"and the server queue {_fmt(ff.get('server_waiting'), '', 1)} < 5: the GPU is not the bottleneck")
        next_steps.append("check batching, caching, tokenizer/preprocessing, client and network before adding GPUs")
        return result("dont_scale_yet")

    nodes, cur = plan.get("nodes"), plan.get("current_nodes")
    share = plan.get("peak_share_of_current_capacity")
    if capacity.get("per_node_rps") in (None, 0.0):
        reasons.append("no capacity under the SLO (it fails already at the lowest load)" if capacity.get("per_node_rps") == 0.0
                       else "capacity under the SLO unknown")
        next_steps.append("fix single-request latency (model size, max_tokens, quantisation) or relax the SLO, then re-measure")
        return result("observe")
    if plan.get("peak_qps") is None:
        reasons.append("no forecast peak given: the capacity is measured but there is nothing to size against")
        next_steps.append("give --peak-qps (the p99 of per-minute traffic, or peak-hour mean × peak factor)")
        return result("observe")
    if nodes is not None and cur is not None and nodes <= cur:
        reasons.append(f"{nodes} node(s) needed for peak {plan['peak_qps']:g} qps × SF {plan['safety_factor']:g}"
                       f" (+{plan['redundancy']} redundancy) ≤ {cur} current: the fleet carries the peak")
        return result("dont_scale_yet")
    if share is not None and cur is not None and 0.7 <= share <= 1.0:
        reasons.append(f"forecast peak is {share:.0%} of current capacity (between 70 % and 100 %): no margin, but not over")
        next_steps.append("watch real traffic for a week; rerun when it stays above 70 % of capacity")
        return result("observe")
    if not telemetry_present or (loaded is not None and loaded.get("gpu_util_pct") is None):
        reasons.append(f"plan says {nodes} node(s)" + (f" vs {cur} current" if cur is not None else "")
                       + ", but there is no GPU telemetry to show the GPU is the limit")
        next_steps.append("re-run with GPU telemetry (gpu-agent / DCGM) and server metrics (queue, KV cache)")
        return result("observe")
    gpu_busy = [r for r in (hp, ff) if r is not None and ((r.get("gpu_util_pct") or 0) > 85 or (r.get("kv_cache_usage_max") or 0) > 0.9)]
    at_peak = _at_peak(rows, plan, capacity)
    e2e_p99 = at_peak.get("e2e_p99_ms") if at_peak else None
    need_more = cur is None or (nodes is not None and nodes > cur)
    if gpu_busy and e2e_p99 is not None and e2e_p99 > 2000 and need_more:
        g = gpu_busy[0]
        kv = g.get("kv_cache_usage_max")
        reasons.append(f"GPU util {_fmt(g.get('gpu_util_pct'), ' %')} / KV cache {_fmt(kv * 100 if kv is not None else None, ' %')}"
                       f" at level {g['level']:g}, E2E P99 {e2e_p99 / 1000:.1f} s > 2 s at the forecast peak")
        reasons.append(f"plan: {nodes} node(s)" + (f" vs {cur} current" if cur is not None else ""))
        return result("scale")
    reasons.append(f"plan says {nodes} node(s)" + (f" vs {cur} current" if cur is not None else "")
                   + f", but the scale rule is not met (GPU busy: {bool(gpu_busy)}, E2E P99 at peak: {_fmt(e2e_p99, ' ms')})")
    next_steps.append("find what limits throughput before buying GPUs (see bottleneck hints)")
    return result("observe")


def checklists(summary: dict[str, Any], run_meta: dict[str, Any], telemetry_series: set[str], slo) -> list[dict[str, Any]]:
    """The 7-item scale review and the 6 preconditions (docs/capacity.md), filled from the data."""
    rows = summary["steps"]
    valid = [r for r in rows if r["valid"]]
    cap, cost, plan = summary["capacity"], summary["cost"], summary["plan"]
    has_gpu = "gpu_util_pct" in telemetry_series or "sm_active" in telemetry_series
    has_server = bool({"server_waiting", "server_running", "kv_cache_usage"} & telemetry_series)
    versions = {k: run_meta.get(k) for k in ("versions", "model", "server", "target") if run_meta.get(k)}
    items: list[dict[str, Any]] = []

    def add(id_: str, text: str, status: str, evidence: str) -> None:
        items.append({"id": id_, "text": text, "status": status, "evidence": evidence})

    # --- the scale review (docs/capacity.md, "Checklists") (all seven must hold before scaling)
    add("review.1_quality_baseline", "Model quality baseline is quantified and meets the business threshold",
        "needs_human", "load tests do not measure answer quality; attach the evaluation-set result")
    lat_ok = bool(valid) and all(r.get("ttft_p95_ms") is not None for r in valid)
    add("review.2_load_test_complete", "Load-test data is complete: per-node throughput, latency distribution, resource use",
        "pass" if len(valid) >= 3 and lat_ok and has_gpu else "fail",
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
