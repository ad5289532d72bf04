"""The words of the analysis: the console headline, summary.md, and the text pieces report.html shows.

Every report opens with the same things, in this order: what could not be trusted (the decision
not completed, an incomplete run, lost workers or records, a simulated target), the run facts
(date, target without credentials, model, scenario, duration, the SLO judged and where it held,
the confidence level, the invalid steps and why), then the headline numbers, each with its
interval.
"""

from __future__ import annotations

from typing import Any

from capacity_plugins.analysis.answer import plain_answer, reasons_in_words
from capacity_plugins.analysis.verdict import LIMIT_NAMES
from capacity_plugins.contracts.summary import Capacity, Cost, Knee, Plan, StepSummary, Summary
from capacity_plugins.outputs import sections
from capacity_plugins.outputs.numbers import JUDGED_MARK, fmt, fmt_iv, fmt_level, fmt_num
from capacity_plugins.outputs.tables import md_table

DECISION_TEXT = {"scale": "SCALE", "dont_scale_yet": "DON'T SCALE YET", "observe": "OBSERVE"}


def _g(v: float) -> str:
    return fmt_num(v)


def alert_lines(summary: Summary) -> list[str]:
    """What the reader must know before any number: the report's banner, the console's first lines."""
    out = [f"Decision not completed: {r}" for r in summary.outcome.reasons]
    # meta.json accounting and the simulator come first among the warnings (validity.meta_warnings)
    keys = ("incomplete", "was lost", "records were lost", "refused to run", "embedded simulator", "last line was cut",
            "no requests were recorded")
    out += [f"Warning: {w}" for w in summary.warnings if any(k in w for k in keys)]
    return out


def slo_attainment_lines(summary: Summary) -> list[str]:
    """Per SLO limit: its key, and each valid level's attainment (✓ met, ✗ missed, ? within noise); a
    section that judges by SLOs of its own (workload classes) says its own (outputs/sections.py)."""
    own = sections.attainment_lines(summary)
    if own is not None:
        return own
    rows = summary.valid_steps()
    slo = summary.slo
    pct = f"P{slo.attainment * 100:g}"
    out = []
    for m, name in LIMIT_NAMES.items():
        key = f"{m[:-3]}_p95_ms"
        limit = getattr(slo, key)
        if limit is None:
            continue
        cells = []
        for r in rows:
            v = r.slo.get(m)
            if v and v.attainment is not None:
                cells.append(f"{fmt_level(r.level)}: {v.attainment:.1%} {JUDGED_MARK[v.judgement]}")
        out.append(f"{name} {pct} ≤ {limit:g} ms (slo.{key}), share of requests under it"
                   f" (needs ≥ {slo.attainment:.0%}): " + (", ".join(cells) or "no valid step"))
    errs = [f"{fmt_level(r.level)}: {r.error_rate:.1%}" for r in rows if r.error_rate is not None]
    out.append(f"errors ≤ {slo.error_rate:.1%} (slo.error_rate): " + (", ".join(errs) or "no valid step"))
    return out


def facts_lines(summary: Summary) -> list[str]:
    run = summary.run
    dur = run.duration_s
    target = run.target or "unknown"
    kind = f"SIMULATED ({run.simulated_because}; GPU readings are simulated)" if run.simulated else "real server"
    lines = [
        f"Run: {run.date_utc or 'date unknown'}, {fmt(dur / 60 if dur is not None else None, 1, ' min')}; "
        f"target {target} — {kind}",
        f"Model: {run.model or 'unknown'}; scenario: {run.scenario or 'unknown'}"
        f" ({run.load_kind or summary.sweep_kind})"
        + ("" if run.complete else f"; INCOMPLETE ({run.incomplete_reason or 'interrupted'})"),
    ]
    own = sections.slo_lines(summary)  # a section that judges by SLOs of its own (workload classes: each class's)
    lines += own if own is not None else ["SLO judged: " + "; ".join(run.slo_limits)]
    lines += slo_attainment_lines(summary)
    lines.append(f"Intervals: {run.confidence:.0%} (verdict.confidence); a step needs ≥ "
                 f"{summary.min_requests} measured requests (load.min_requests)")
    for s in run.invalid_steps:
        lines.append(f"Invalid step {fmt_level(s.level)}: " + "; ".join(s.reasons))
    for w in run.workers_lost:
        lines.append(f"Lost worker: {w.worker} ({w.reason or 'no heartbeat'})")
    return lines


def _capacity_line(cap: Capacity) -> str:
    if cap.per_node_rps is None:
        return f"Capacity per node under the SLO: unknown ({cap.method})"
    limit = LIMIT_NAMES.get(cap.limiting_slo or "", cap.limiting_slo)
    lim = f", limited by {limit}" if limit else ""
    if cap.limiting_workload:
        lim = f", limited by class {cap.limiting_workload}" + (f" ({limit})" if limit else "")
    least = " (at least: the SLO never failed)" if cap.method == "never_failed" else ""
    ci = cap.per_node_rps_ci  # as the plain answer says it: 3 significant digits, the same figure everywhere
    ci_s = f" [{fmt_num(ci[0])}–{fmt_num(ci[1])}]" if ci else ""
    return (f"Capacity per node under the SLO: {fmt_num(cap.per_node_rps)} req/s{ci_s}{least} "
            f"({cap.method}{lim}; last pass {fmt_level(cap.last_pass_level)}, "
            f"first fail {fmt_level(cap.first_fail_level)})")


def _knee_line(knee: Knee) -> str:
    if knee.value is None or knee.bracket is None:
        return f"Knee: none — {knee.reason}"
    iv = knee.interval
    iv_s = f", interval {fmt_level(iv[0])}–{fmt_level(iv[1])}" if iv and iv[0] != iv[1] else ""
    return (f"Knee: {fmt_level(knee.value)} {knee.unit} (bracket {fmt_level(knee.bracket[0])}–"
            f"{fmt_level(knee.bracket[1])}{iv_s}, "
            f"{knee.method}, confidence {knee.confidence}): {knee.reason}")


def throughput_line(steps: list[StepSummary]) -> str | None:
    """Which estimator gave each step's throughput (docs/capacity.md, "Uncertainty")."""
    little = [r for r in steps if r.rps_method == "littles_law"]
    fell_back = [r for r in steps if r.rps_methods_agree is False]
    if not little and not fell_back:
        return None if not steps else "Throughput: counted (successful requests ÷ measured window)"
    text = ("Throughput: Little's law, users ÷ mean E2E" + (", at every level" if len(little) == len(steps) else
            f", at levels {', '.join(fmt_level(r.level) for r in little)}")
            + "; the count (requests ÷ window) agrees within both intervals")
    if fell_back:
        text += ("; counted at levels " + ", ".join(fmt_level(r.level) for r in fell_back)
                 + ", where Little's law disagreed with the count (users idle between requests, or a client "
                 "that could not keep up)")
    return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def plan_words(plan: Plan, cap: Capacity) -> list[str]:
    """The plan as a planner says it: "20 req/s × 1.5 safety ÷ 8.51 req/s per node = 3.53 → 4 nodes,
    + 1 spare = 5 nodes (5 GPUs); you have 1" — no setting names, whole nodes as whole numbers."""
    out = []
    peak = plan.peak_qps
    per_node = cap.per_node_rps
    if plan.refused:
        out.append(f"refused — {plan.refused}")
    elif plan.infeasible:
        out.append(f"none — {plan.infeasible}")
    elif plan.nodes is not None and peak is not None and per_node:
        sf, spare, nodes = plan.safety_factor or 1, plan.redundancy or 0, plan.nodes
        need = peak * sf / per_node
        text = (f"{fmt_num(peak)} req/s" + (f" × {sf:g} safety" if sf != 1 else "")
                + f" ÷ {fmt_num(per_node)} req/s per node = {fmt_num(need)} → {_plural(nodes - spare, 'node')}")
        if spare:
            text += f", + {spare} spare = {_plural(nodes, 'node')}"
        gpn = plan.gpus_per_node or 1
        if plan.gpus is not None:
            text += f" ({_plural(plan.gpus, 'GPU')}" + (f", {gpn} per node" if gpn != 1 else "") + ")"
        if plan.current_nodes is not None:
            text += f"; you have {plan.current_nodes}"
        out.append(text)
        span, ci = plan.nodes_interval, cap.per_node_rps_ci
        if span and span[0] != span[1] and ci:
            out.append(f"anywhere in the capacity's interval ({fmt_num(ci[0])}–{fmt_num(ci[1])} req/s per node): "
                       f"{span[0]}–{span[1]} nodes")
    elif peak is None:
        out.append("no forecast peak given: pass --peak-qps to size the fleet")
    if plan.gpus_by_concurrency is not None:
        out.append(f"by concurrency: a peak of {fmt_num(plan.peak_concurrency)} requests in flight ÷ "
                   f"{fmt_num(plan.per_gpu_concurrency)} per GPU → {_plural(plan.gpus_by_concurrency, 'GPU')}")
    return out


def _plan_lines(plan: Plan, cap: Capacity) -> list[str]:
    words = plan_words(plan, cap)
    if words and plan.peak_qps is None and not plan.refused and not plan.infeasible:
        words = words[1:]  # no peak: the console says nothing of a plan (the notes say how to get one)
    return [f"Plan: {w}" if i == 0 and not w.startswith("by concurrency") else w[0].upper() + w[1:]
            for i, w in enumerate(words)]


def cost_lines(cost: Cost) -> list[str]:
    """The cost in words, each figure to 3 significant digits; empty without a GPU-hour price."""
    if cost.gpu_hour_usd is None:
        return []
    figures = (("GPU-hour price", cost.gpu_hour_usd, None),
               ("per 1 000 requests at capacity", cost.per_1k_requests_usd, cost.per_1k_requests_ci_usd),
               ("per 1 M output tokens", cost.per_1m_output_tokens_usd, None),
               ("per output that met the SLO", cost.per_effective_output_usd, None))
    return [f"{label}: {fmt_iv(v, list(ci) if ci else None)} USD" for label, v, ci in figures if v is not None]


def headline(summary: Summary) -> list[str]:
    """What the terminal prints, and the top of summary.md / report.html."""
    cap, plan, v = summary.capacity, summary.plan, summary.verdict
    lines = [f"Verdict: {DECISION_TEXT[v.decision]} — " + "; ".join(v.reasons)]
    lines += alert_lines(summary)
    lines.append(_capacity_line(cap))
    lines += sections.headline(summary)  # e.g. a cache probe's answer (outputs/sections.py)
    lines.append(_knee_line(summary.knee))
    estimator = throughput_line(summary.steps)
    if estimator:
        lines.append(estimator)
    lines += _plan_lines(plan, cap)
    c = summary.cost
    if c.per_1k_requests_usd is not None:
        lines.append(f"Cost at {fmt_num(c.gpu_hour_usd)} USD per GPU-hour: " + "; ".join(cost_lines(c)[1:]))
    return lines


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


def table_columns(summary: Summary) -> list[tuple[str, str, int | None, str | None]]:
    sim = summary.run.simulated
    cols = [c for c in TABLE_COLS if any(column(r, c[0]) is not None for r in summary.steps)]
    return [(k, f"{h} (simulated)" if sim and k in TELEMETRY_COLS else h, d, ci) for k, h, d, ci in cols]


def column(r: StepSummary, key: str) -> Any:
    """A load-table column of a step: the columns name the fields of the row (contracts/summary.py)."""
    return getattr(r, key)


def cell(r: StepSummary, key: str, digits: int | None, ci_key: str | None = None) -> str:
    """One cell of the load table: a value with its interval to the interval's precision, else to 3
    significant digits; a level as a reader says it (10.9, not 10.9333)."""
    v = column(r, key)
    if key == "level":
        return fmt_level(v)
    if key == "error_rate":
        return "–" if v is None else "0" if v == 0 else fmt_num(v * 100, 2)
    if key == "ttft_queue_share":
        return "–" if v is None else f"{v:.0%}"
    if key == "slo_judgement":
        return {"pass": "pass", "fail": "fail"}.get(v or "", "pass?" if r.slo_pass else "fail?")
    if isinstance(v, float) and digits != 0 or ci_key:
        return fmt_iv(v, column(r, ci_key) if ci_key else None)
    return fmt(v, 0) if isinstance(v, int | float) and not isinstance(v, bool) else fmt(v)


# The load table a planner reads (summary.md, the top of report.html's table): what decides, nothing
# else; every column is in steps.csv and in the folded full table. key, header, interval key.
SHORT_COLS: list[tuple[str, str, str | None]] = [
    ("level", "level", None), ("arm", "arm", None), ("valid", "valid", None),
    ("rps", "throughput req/s", "rps_ci"), ("ttft_p95_ms", "TTFT P95 ms", "ttft_p95_ci_ms"),
    ("tpot_p95_ms", "TPOT P95 ms", "tpot_p95_ci_ms"), ("itl_p95_ms", "ITL P95 ms", "itl_p95_ci_ms"),
    ("e2e_p95_ms", "E2E P95 ms", "e2e_p95_ci_ms"), ("error_rate", "errors %", None), ("gpu_util_pct", "GPU %", None),
    ("slo_judgement", "SLO", None),
]


def short_columns(summary: Summary) -> list[tuple[str, str, int | None, str | None]]:
    """The columns of the short load table, as (key, header, digits, interval key) like table_columns:
    level, valid, throughput, TTFT / TPOT / E2E P95 (ITL P95 when the SLO limits it, or in place of a
    missing TPOT), errors, GPU, SLO — the arm only for a cache probe. The conclusion follows them."""
    rows = summary.steps
    has = {k for k, _, _ in SHORT_COLS if any(column(r, k) is not None for r in rows)}
    sim = summary.run.simulated
    digits = {k: d for k, _, d, _ in TABLE_COLS}
    out = []
    for key, head, ci in SHORT_COLS:
        if key not in has and key not in ("level", "valid", "slo_judgement"):
            continue
        if key == "itl_p95_ms" and not summary.slo.itl_p95_ms and "tpot_p95_ms" in has:
            continue
        if key in TELEMETRY_COLS and sim:
            head += " (simulated)"
        out.append((key, head, digits.get(key), ci))
    return out


def _csv_flat(prefix: str, v: Any, out: dict[str, Any]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _csv_flat(f"{prefix}_{k}", x, out)
    elif isinstance(v, list | tuple) and len(v) == 2 and all(x is None or isinstance(x, int | float) for x in v) \
            and ("ci" in prefix or "interval" in prefix or "window" in prefix):
        out[f"{prefix}_lo"], out[f"{prefix}_hi"] = v
    elif isinstance(v, list | tuple):
        out[prefix] = "; ".join(str(x) for x in v)
    else:
        out[prefix] = v


def steps_csv(summary: Summary) -> str:
    """Every column of every step (summary.json's steps, flattened: an interval is two columns _lo and
    _hi, a nested key joins its parts with _), one row per step, numbers as measured — the full load
    table for a spreadsheet."""
    import csv
    import io

    flat = []
    for r in summary.steps:
        row: dict[str, Any] = {}
        for k, v in r.to_json().items():  # the row as summary.json has it: every key, in its order
            _csv_flat(k, v, row)
        flat.append(row)
    cols: dict[str, None] = {}
    for row in flat:
        cols.update(dict.fromkeys(row))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(cols))
    for row in flat:
        w.writerow(["" if row.get(c) is None else row[c] for c in cols])
    return buf.getvalue()


def setting_value(v: Any) -> str:
    """A setting as it is written in the scenario: 0.5, 1500, 1 — exact, not rounded like a measurement."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"{v:g}"
    return fmt(v)


def settings_lines(summary: Summary) -> list[str]:
    """The scenario settings that decided the verdict ("key = value: meaning"), when the verdict lists them."""
    return [f"{item.key} = {setting_value(item.value)}" + (f": {item.meaning}" if item.meaning else "")
            for item in summary.verdict.settings or []]


def decision_lines(summary: Summary) -> list[str]:
    """Below the plain answer: the verdict's reasons and what to measure next, as the terminal says them
    (answer.reasons_in_words), then what limits the server."""
    v = summary.verdict
    out = [r.removeprefix("- ") for r in reasons_in_words(summary)]
    if v.bottleneck:
        out.append(f"Bottleneck: {v.bottleneck}" + (" — " + "; ".join(v.bottleneck_hints)
                                                    if v.bottleneck_hints else ""))
    return out


def detail_lines(summary: Summary) -> list[str]:
    """The numbers behind the answer (capacity, knee, plan, cost): the headline without its verdict line
    and alerts, which the page says above."""
    alerts = alert_lines(summary)
    return [h for h in headline(summary)[1:] if h not in alerts]


TTFT_COLS = ("client_ttft_mean_ms", "server_queue_mean_ms", "server_prefill_mean_ms", "server_ttft_mean_ms",
             "client_remainder_ms", "ttft_queue_share")


def markdown(summary: Summary) -> str:
    v = summary.verdict
    out = [f"# Capacity analysis{': ' + summary.name if summary.name else ''}", "",
           f"**{plain_answer(summary)}**", ""]
    out += [f"- {line}" for line in alert_lines(summary)]
    out += ["", f"## Decision: {DECISION_TEXT[v.decision]}", ""] + [f"- {line}" for line in decision_lines(summary)]
    if settings_lines(summary):
        out += ["", "### Settings that decided this", ""] + [f"- {line}" for line in settings_lines(summary)]
    out += ["", "## Details", ""] + [f"- {line}" for line in detail_lines(summary)]
    for n in summary.capacity.notes + summary.plan.notes:
        out.append(f"- note: {n}")
    for w in summary.warnings:
        out.append(f"- warning: {w}")
    out += ["", "## Run", ""] + [f"- {line}" for line in facts_lines(summary)]
    out += sections.markdown(summary)  # the sections this run has: a search, classes, a probe, a trace, ...
    out += ["", "## Load table", "",
            f"Intervals in brackets: {summary.run.confidence:.0%}; ∞ = the step has too few "
            "requests to bound that percentile. Every column of every step: [steps.csv](steps.csv) (an interval "
            "is two columns, _lo and _hi).", ""]
    cols = short_columns(summary)
    out += md_table([c[1] for c in cols] + ["conclusion"],
                     [[cell(r, k, d, ci) for k, _, d, ci in cols] + [r.conclusion or ""] for r in summary.steps])
    ttft = [c for c in table_columns(summary) if c[0] in TTFT_COLS]
    if ttft:
        lead = [c for c in table_columns(summary) if c[0] in ("level", "arm")]
        out += ["", "## Where TTFT goes", "", TTFT_LEGEND, ""]
        out += md_table([c[1] for c in lead + ttft], [[cell(r, k, d, ci) for k, _, d, ci in lead + ttft]
                                                       for r in summary.steps])
        out += [f"- {n}" for n in summary.ttft_breakdown.notes]
    out += ["", "## Checklist", ""]
    for item in summary.checklist:
        mark = {"pass": "x", "fail": " ", "needs_human": "?"}[item.status]
        out.append(f"- [{mark}] {item.text} — **{item.status}**: {item.evidence}")
    out += ["", "## Stability", "", "- " + "; ".join(summary.stability.findings)]
    return "\n".join(out) + "\n"
