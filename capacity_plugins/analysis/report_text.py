"""The words of the analysis: the console headline, summary.md, and the text pieces report.html shows.

Every report opens with the same things, in this order: what could not be trusted (the decision
not completed, an incomplete run, lost workers or records, a simulated target), the run facts
(date, target without credentials, model, scenario, duration, the SLO judged and where it held,
the confidence level, the invalid steps and why), then the headline numbers, each with its
interval.
"""

from __future__ import annotations

import math
from typing import Any

from capacity_plugins.analysis import cache_probe
from capacity_plugins.analysis.verdict import LIMIT_NAMES

DECISION_TEXT = {"scale": "SCALE", "dont_scale_yet": "DON'T SCALE YET", "observe": "OBSERVE"}
JUDGED_MARK = {"pass": "✓", "fail": "✗", "uncertain": "?"}


def fmt(v: Any, digits: int = 1, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            return "∞"
        return f"{v:,.{digits}f}{unit}"
    return str(v)


def fmt_ci(ci: list[float | None] | None, digits: int = 1) -> str:
    """(lo–hi); an end the data cannot support is ∞ (upper) or ? (lower)."""
    if not ci:
        return ""
    lo = "?" if ci[0] is None else f"{ci[0]:,.{digits}f}"
    hi = "∞" if ci[1] is None or not math.isfinite(ci[1]) else f"{ci[1]:,.{digits}f}"
    return f"({lo}–{hi})"


def _g(v: float) -> str:
    return f"{v:.3g}"


def alert_lines(summary: dict[str, Any]) -> list[str]:
    """What the reader must know before any number: the report's banner, the console's first lines."""
    out = [f"Decision not completed: {r}" for r in summary["outcome"]["reasons"]]
    # meta.json accounting and the simulator come first among the warnings (validity.meta_warnings)
    keys = ("incomplete", "was lost", "records were lost", "refused to run", "embedded simulator", "last line was cut",
            "no requests were recorded")
    out += [f"Warning: {w}" for w in summary["warnings"] if any(k in w for k in keys)]
    return out


def slo_attainment_lines(summary: dict[str, Any]) -> list[str]:
    """Per SLO limit: its key, and each valid level's attainment (✓ met, ✗ missed, ? within noise)."""
    if summary.get("workloads"):
        from capacity_plugins.analysis import workloads_text

        return workloads_text.attainment_lines(summary)
    rows = [r for r in summary["steps"] if r["valid"]]
    slo = summary["slo"]
    pct = f"P{slo['attainment'] * 100:g}"
    out = []
    for m, name in LIMIT_NAMES.items():
        key = f"{m[:-3]}_p95_ms"
        if slo.get(key) is None:
            continue
        cells = []
        for r in rows:
            v = r["slo"].get(m)
            if v and v["attainment"] is not None:
                cells.append(f"{r['level']:g}: {v['attainment']:.1%} {JUDGED_MARK[v['judgement']]}")
        out.append(f"{name} {pct} ≤ {slo[key]:g} ms (slo.{key}), share of requests under it"
                   f" (needs ≥ {slo['attainment']:.0%}): " + (", ".join(cells) or "no valid step"))
    errs = [f"{r['level']:g}: {r['error_rate']:.1%}" for r in rows if r["error_rate"] is not None]
    out.append(f"errors ≤ {slo['error_rate']:.1%} (slo.error_rate): " + (", ".join(errs) or "no valid step"))
    return out


def facts_lines(summary: dict[str, Any]) -> list[str]:
    run = summary.get("run") or {}
    dur = run.get("duration_s")
    sim = run.get("simulated")
    target = run.get("target") or "unknown"
    kind = f"SIMULATED ({run.get('simulated_because')}; GPU readings are simulated)" if sim else "real server"
    lines = [
        f"Run: {run.get('date_utc') or 'date unknown'}, {fmt(dur / 60 if dur is not None else None, 1, ' min')}; "
        f"target {target} — {kind}",
        f"Model: {run.get('model') or 'unknown'}; scenario: {run.get('scenario') or 'unknown'}"
        f" ({run.get('load_kind') or summary.get('sweep_kind')})"
        + ("" if run.get("complete", True) else f"; INCOMPLETE ({run.get('incomplete_reason') or 'interrupted'})"),
        "SLO judged: " + "; ".join(run.get("slo_limits") or []),
    ]
    if summary.get("workloads"):
        from capacity_plugins.analysis import workloads_text

        lines[-1:] = workloads_text.slo_lines(summary)
    lines += slo_attainment_lines(summary)
    lines.append(f"Intervals: {run.get('confidence', 0.95):.0%} (verdict.confidence); a step needs ≥ "
                 f"{summary.get('min_requests')} measured requests (load.min_requests)")
    for s in run.get("invalid_steps") or []:
        lines.append(f"Invalid step {s['level']:g}: " + "; ".join(s["reasons"]))
    for w in run.get("workers_lost") or []:
        lines.append(f"Lost worker: {w.get('worker')} ({w.get('reason') or 'no heartbeat'})")
    return lines


def _capacity_line(cap: dict[str, Any]) -> str:
    if cap.get("per_node_rps") is None:
        return f"Capacity per node under the SLO: unknown ({cap.get('method')})"
    ci = cap.get("per_node_rps_ci")
    ci_s = f" [{_g(ci[0])}–{_g(ci[1])}]" if ci else ""
    lim = f", limited by {cap['limiting_slo']}" if cap.get("limiting_slo") else ""
    if cap.get("limiting_workload"):
        lim = f", limited by class {cap['limiting_workload']}" + (f" ({cap['limiting_slo']})" if cap.get("limiting_slo") else "")
    least = " (at least: the SLO never failed)" if cap.get("method") == "never_failed" else ""
    return (f"Capacity per node under the SLO: {_g(cap['per_node_rps'])} rps{ci_s}{least} ({cap['method']}{lim}; "
            f"last pass {fmt(cap.get('last_pass_level'), 0)}, first fail {fmt(cap.get('first_fail_level'), 0)})")


def _knee_line(knee: dict[str, Any]) -> str:
    if knee.get("value") is None:
        return f"Knee: none — {knee['reason']}"
    iv = knee.get("interval")
    iv_s = f", interval {iv[0]:g}–{iv[1]:g}" if iv and iv[0] != iv[1] else ""
    return (f"Knee: {knee['value']:g} {knee['unit']} (bracket {knee['bracket'][0]:g}–{knee['bracket'][1]:g}{iv_s}, "
            f"{knee['method']}, confidence {knee['confidence']}): {knee['reason']}")


def _plan_lines(plan: dict[str, Any], cap: dict[str, Any]) -> list[str]:
    out = []
    if plan.get("refused"):
        out.append(f"Plan: refused — {plan['refused']}")
    elif plan.get("infeasible"):
        out.append(f"Plan: none — {plan['infeasible']}")
    elif plan.get("nodes") is not None:
        span = plan.get("nodes_interval")
        span_s = f" ({span[0]}–{span[1]} within the capacity interval)" if span and span[0] != span[1] else ""
        out.append(f"Plan: {plan['nodes']} node(s){span_s} = ceil({plan['peak_qps']:g} × {plan['safety_factor']:g} / "
                   f"{_g(cap['per_node_rps'])}) + {plan['redundancy']}; {plan['gpus']} GPU(s)")
    if plan.get("gpus_by_concurrency") is not None:
        out.append(f"By concurrency: {plan['peak_concurrency']:g} / {_g(plan['per_gpu_concurrency'])} per GPU "
                   f"→ {plan['gpus_by_concurrency']} GPU(s)")
    return out


def headline(summary: dict[str, Any]) -> list[str]:
    """What the terminal prints, and the top of summary.md / report.html."""
    cap, knee, plan, v = summary["capacity"], summary["knee"], summary["plan"], summary["verdict"]
    lines = [f"Verdict: {DECISION_TEXT[v['decision']]} — " + "; ".join(v["reasons"])]
    lines += alert_lines(summary)
    lines.append(_capacity_line(cap))
    if summary.get("cache_probe"):
        lines.append(f"Prefix-cache probe: {summary['cache_probe']['answer']}")
    lines.append(_knee_line(knee))
    lines += _plan_lines(plan, cap)
    c = summary["cost"]
    if c.get("per_1k_requests_usd") is not None:
        ci = c.get("per_1k_requests_ci_usd")
        lines.append(f"Cost: {c['per_1k_requests_usd']:.4g} USD / 1k requests"
                     + (f" [{ci[0]:.4g}–{ci[1]:.4g}]" if ci else "") + ", "
                     f"{fmt(c.get('per_1m_output_tokens_usd'), 3)} USD / 1M output tokens, "
                     f"{fmt(c.get('per_effective_output_usd'), 5)} USD per effective output")
    return lines


def search_lines(summary: dict[str, Any]) -> list[str]:
    """A capacity search's bracket and the path it took; empty for fixed sweeps."""
    s = summary.get("search")
    if not s:
        return []
    unit = s.get("unit", "")
    lo, hi = s.get("highest_pass"), s.get("lowest_fail")
    if lo is not None and hi is not None:
        found = f"the SLO held at {lo:g} {unit} and not (or not surely) at {hi:g} {unit}"
    elif lo is not None:
        found = f"the SLO held at {lo:g} {unit}, the highest level tried: capacity is at least that"
    elif hi is not None:
        found = f"no level was shown to meet the SLO (the lowest tried: {hi:g} {unit})"
    else:
        found = "no step was judged"
    state = "converged" if s.get("converged") else "not converged"
    path = ", ".join(f"{st['level']:g} {st['judgement']}" for st in s.get("steps", []))
    return [f"Capacity search ({state}): {found}; stopped: {s.get('stopped')}",
            f"Steps measured, in order: {path or 'none'}"]


def probe_markdown(probe: dict[str, Any]) -> list[str]:
    """The "Prefix-cache probe" section of summary.md: the answer, how to read it, the arms per level."""
    head, rows = cache_probe.table(probe)
    return ([f"- {line}" for line in cache_probe.section_lines(probe)] + ["", "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])


# key, header, digits, interval key (None: no interval shown)
TABLE_COLS: list[tuple[str, str, int | None, str | None]] = [
    ("level", "level", 0, None), ("arm", "arm", 0, None), ("valid", "valid", 0, None), ("achieved_rps", "achieved rps", 2, None),
    ("rps", "ok rps", 2, "rps_ci"), ("goodput_rps", "goodput rps", 2, None),
    ("requests", "requests", 0, None), ("error_rate", "error %", None, None), ("ttft_p50_ms", "TTFT P50", 0, None),
    ("ttft_p95_ms", "TTFT P95", 0, "ttft_p95_ci_ms"), ("ttft_p99_ms", "TTFT P99", 0, "ttft_p99_ci_ms"),
    # Where TTFT goes (means, ms): the server's own histograms, the client's mean, what is left between.
    ("client_ttft_mean_ms", "TTFT mean", 1, None), ("server_queue_mean_ms", "server queue ms", 1, None),
    ("server_prefill_mean_ms", "server prefill ms", 1, None), ("server_ttft_mean_ms", "server TTFT ms", 1, None),
    ("client_remainder_ms", "client rest ms", 2, None), ("ttft_queue_share", "queue share", None, None),
    ("itl_p95_ms", "ITL P95", 1, None), ("tpot_p95_ms", "TPOT P95", 1, "tpot_p95_ci_ms"),
    ("e2e_p50_ms", "E2E P50", 0, None), ("e2e_p95_ms", "E2E P95", 0, "e2e_p95_ci_ms"),
    ("e2e_p99_ms", "E2E P99", 0, "e2e_p99_ci_ms"), ("output_tokens_per_s", "out tok/s", 0, None),
    ("gpu_util_pct", "GPU %", 0, None), ("vram_used_gb", "VRAM GB", 1, None), ("gpu_temp_max_c", "temp °C", 0, None),
    ("gpu_power_w", "power W", 0, None), ("server_waiting", "queue", 1, None), ("kv_cache_usage_max", "KV max", 2, None),
    ("client_cpu_max_pct", "client CPU %", 0, None), ("client_limited", "client-limited", 0, None),
    ("slo_judgement", "SLO", 0, None),
]
# Columns whose readings come from the target's telemetry: simulated when the target was.
TELEMETRY_COLS = {"gpu_util_pct", "vram_used_gb", "gpu_temp_max_c", "gpu_power_w", "server_waiting", "kv_cache_usage_max",
                  "server_queue_mean_ms", "server_prefill_mean_ms", "server_ttft_mean_ms"}


TTFT_LEGEND = ("Where TTFT goes (means over the measured window, ms): server queue + prefill + the rest of the "
               "server's TTFT, then the client rest = client TTFT mean − server TTFT mean (network + client); "
               "queue share = server queue ÷ server TTFT.")


def table_columns(summary: dict[str, Any]) -> list[tuple[str, str, int | None, str | None]]:
    sim = (summary.get("run") or {}).get("simulated")
    cols = [c for c in TABLE_COLS if any(r.get(c[0]) is not None for r in summary["steps"])]
    return [(k, f"{h} (simulated)" if sim and k in TELEMETRY_COLS else h, d, ci) for k, h, d, ci in cols]


def cell(r: dict[str, Any], key: str, digits: int | None, ci_key: str | None = None) -> str:
    v = r.get(key)
    if key == "error_rate":
        return "–" if v is None else f"{v * 100:.2f}"
    if key == "ttft_queue_share":
        return "–" if v is None else f"{v:.0%}"
    if key == "slo_judgement":
        return {"pass": "pass", "fail": "fail"}.get(v or "", "pass?" if r.get("slo_pass") else "fail?")
    text = fmt(v, digits if digits is not None else 2)
    if ci_key and r.get(ci_key) and v is not None:
        text += " " + fmt_ci(r[ci_key], digits if digits is not None else 2)
    return text


TRACE_COLS = [("window", "window"), ("trace s", "span"), ("offered req/s", "offered_rps"),
              ("achieved req/s", "achieved_rps"), ("requests", "requests"), ("TTFT p95 ms", "ttft_p95_ms"),
              ("TTFT p95 from schedule ms", "ttft_from_schedule_p95_ms"), ("SLO", "slo")]


def trace_cell(w: dict[str, Any], key: str) -> str:
    """One cell of the trace-replay table (markdown and HTML)."""
    if key == "window":
        return str(w["window"] + 1)
    if key == "span":
        return f"{w['trace_start_s']:g}–{w['trace_end_s']:g}"
    if key == "slo":
        verdict = {True: "held", False: "BROKE", None: "—"}[w["slo_pass"]]
        return verdict + ("" if w["valid"] or w["slo_pass"] is None else " (flagged)")
    return fmt(w.get(key), 2 if key.endswith("rps") else 0)


def markdown(summary: dict[str, Any]) -> str:
    out = [f"# Capacity analysis{': ' + summary['name'] if summary.get('name') else ''}", ""]
    out += [f"- {line}" for line in alert_lines(summary)]
    out += ["", "## Run", ""] + [f"- {line}" for line in facts_lines(summary)]
    out += ["", "## Decision", ""]
    out += [f"- {line}" for line in headline(summary) if line not in alert_lines(summary)]
    for n in summary["capacity"].get("notes", []) + summary["plan"].get("notes", []):
        out.append(f"- note: {n}")
    if summary["verdict"]["bottleneck_hints"]:
        out.append(f"- bottleneck: {summary['verdict']['bottleneck']} — " + "; ".join(summary["verdict"]["bottleneck_hints"]))
    for w in summary["warnings"]:
        out.append(f"- warning: {w}")
    if summary.get("search"):
        out += ["", "## Capacity search", ""] + [f"- {line}" for line in search_lines(summary)]
    if summary.get("workloads"):
        from capacity_plugins.analysis import workloads_text

        out += workloads_text.markdown(summary)
    if summary.get("cache_probe"):
        out += ["", "## Prefix-cache probe", ""] + probe_markdown(summary["cache_probe"])
    if summary.get("trace"):
        out += ["", "## Trace replay", "", f"- {summary['trace']['line']}", ""]
        out += ["| " + " | ".join(h for h, _ in TRACE_COLS) + " |", "|" + "---|" * len(TRACE_COLS)]
        out += ["| " + " | ".join(trace_cell(w, k) for _, k in TRACE_COLS) + " |" for w in summary["trace"]["windows"]]
        if summary["trace"].get("turns"):
            out += ["", "| turn | requests | prompt tokens (mean) | TTFT p50 ms | TTFT p95 ms |", "|---|---|---|---|---|"]
            out += [f"| {t['turn']} | {t['requests']} | {fmt(t['prompt_tokens_mean'], 0)} | {fmt(t['ttft_p50_ms'], 0)} "
                    f"| {fmt(t['ttft_p95_ms'], 0)} |" for t in summary["trace"]["turns"]]
    out += ["", "## Load table", "",
            f"Intervals in brackets: {(summary.get('run') or {}).get('confidence', 0.95):.0%}; ∞ = the step has too few "
            "requests to bound that percentile.", ""]
    cols = table_columns(summary)
    out.append("| " + " | ".join(c[1] for c in cols) + " | conclusion |")
    out.append("|" + "---|" * (len(cols) + 1))
    for r in summary["steps"]:
        out.append("| " + " | ".join(cell(r, k, d, ci) for k, _, d, ci in cols) + f" | {r.get('conclusion', '')} |")
    out += ["", TTFT_LEGEND] + [f"- {n}" for n in (summary.get("ttft_breakdown") or {}).get("notes", [])]
    out += ["", "## Checklist", ""]
    for item in summary["checklist"]:
        mark = {"pass": "x", "fail": " ", "needs_human": "?"}[item["status"]]
        out.append(f"- [{mark}] {item['text']} — **{item['status']}**: {item['evidence']}")
    st = summary.get("stability") or {}
    out += ["", "## Stability", "", "- " + "; ".join(st.get("findings", []))]
    return "\n".join(out) + "\n"
