"""report.html (one self-contained page, PNGs embedded as base64), summary.md and the PNGs.

Matplotlib with the Agg backend: no display, no browser needed to render.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from capacity_plugins.analysis.load import RunData  # noqa: E402

DECISION_TEXT = {"scale": "SCALE", "dont_scale_yet": "DON'T SCALE YET", "observe": "OBSERVE"}
DECISION_COLOUR = {"scale": "#b3261e", "dont_scale_yet": "#1e6b35", "observe": "#8a6d00"}


def _f(v: Any, digits: int = 1, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        if isinstance(v, float) and not np.isfinite(v):
            return "∞"
        return f"{v:,.{digits}f}{unit}"
    return str(v)


# ------------------------------------------------------------------------------ plots


def _save(fig: Any, out: Path) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    out.write_bytes(data)
    return data


def plot_throughput_latency(summary: dict[str, Any], out: Path) -> bytes:
    rows = sorted(summary["steps"], key=lambda r: r["level"])
    unit = "users" if summary["sweep_kind"] == "concurrency" else "rps offered"
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    ok = [r for r in rows if r["valid"]]
    bad = [r for r in rows if not r["valid"]]
    a1.plot([r["level"] for r in ok], [r["rps"] or 0 for r in ok], "o-", label="throughput (ok rps)")
    a1.plot([r["level"] for r in ok], [r["goodput_rps"] or 0 for r in ok], "s--", label="goodput (SLO met)", alpha=0.7)
    if bad:
        a1.plot([r["level"] for r in bad], [r["rps"] or 0 for r in bad], "x", color="grey", label="invalid (client-limited)")
    knee = summary["knee"]
    if knee.get("value") is not None:
        a1.axvline(knee["value"], color="#b3261e", ls=":", label=f"knee {knee['value']:g} ({knee['confidence']})")
    cap = summary["capacity"].get("per_node_rps")
    if cap:
        a1.axhline(cap * summary["capacity"].get("replicas_behind_url", 1), color="#1e6b35", ls="--", lw=1,
                   label="capacity under SLO")
    a1.set_xlabel(f"load ({unit})")
    a1.set_ylabel("requests / s")
    a1.set_title("Throughput vs load")
    if a1.get_legend_handles_labels()[0]:
        a1.legend(fontsize=8)
    plotted = False
    for key, label in (("ttft_p95_ms", "TTFT P95"), ("e2e_p95_ms", "E2E P95"), ("tpot_p95_ms", "TPOT P95")):
        ys = [r.get(key) for r in ok]
        if any(y is not None and y > 0 for y in ys):
            a2.plot([r["level"] for r in ok], [np.nan if y is None else y for y in ys], "o-", label=label)
            plotted = True
    slo = summary["slo"]
    for key, label in (("ttft_p95_ms", "TTFT SLO"), ("e2e_p95_ms", "E2E SLO"), ("tpot_p95_ms", "TPOT SLO")):
        if slo.get(key):
            a2.axhline(slo[key], ls="--", lw=1, color="grey")
            a2.annotate(label, (a2.get_xlim()[0], slo[key]), fontsize=7, va="bottom")
    if knee.get("value") is not None:
        a2.axvline(knee["value"], color="#b3261e", ls=":")
    if plotted:
        a2.set_yscale("log")
        a2.legend(fontsize=8)
    a2.set_xlabel(f"load ({unit})")
    a2.set_ylabel("ms")
    a2.set_title("Latency vs load")
    for ax in (a1, a2):
        if rows and min(r["level"] for r in rows) > 0 and max(r["level"] for r in rows) / max(min(r["level"] for r in rows), 1e-9) >= 8:
            ax.set_xscale("log", base=2)
    return _save(fig, out)


def plot_distributions(run: RunData, summary: dict[str, Any], out: Path) -> bytes:
    req = run.requests
    m = req[req["ok"] & ~req["warmup"] & (req["step"] >= 0)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    levels = {s.index: s.level for s in run.steps}
    for ax, col, title in ((axes[0], "ttft_ms", "TTFT per step"), (axes[1], "e2e_ms", "E2E per step")):
        data, labels = [], []
        for idx in sorted(levels):
            v = m.loc[m["step"] == idx, col].dropna().to_numpy()
            if v.size > 20000:  # a box plot of 20 k points is as exact as one of 2 M
                v = np.random.default_rng(0).choice(v, 20000, replace=False)
            data.append(v if v.size else np.array([np.nan]))
            labels.append(f"{levels[idx]:g}")
        if any(np.isfinite(d).any() and np.nanmax(d) > 0 for d in data):
            ax.boxplot(data, whis=(1, 99), showfliers=False)
            ax.set_xticks(range(1, len(labels) + 1), labels)
            ax.set_yscale("log")
        ax.set_title(title + " (whiskers P1–P99)")
        ax.set_xlabel("level")
        ax.set_ylabel("ms")
        limit = summary["slo"].get("ttft_p95_ms" if col == "ttft_ms" else "e2e_p95_ms")
        if limit:
            ax.axhline(limit, ls="--", color="grey", lw=1)
    return _save(fig, out)


def plot_timeline(run: RunData, out: Path) -> bytes | None:
    t = run.telemetry
    if t is None or t.empty:
        return None
    want = [("gpu_util_pct", "GPU util %"), ("kv_cache_usage", "KV cache (0–1)"), ("server_waiting", "server queue"),
            ("server_running", "server running")]
    present = [(s, lab) for s, lab in want if (t["series"] == s).any()]
    if not present:
        return None
    fig, axes = plt.subplots(len(present), 1, figsize=(11, 1.8 * len(present) + 0.6), sharex=True, squeeze=False)
    starts = [st.start_unix for st in run.steps if st.start_unix is not None]
    t0 = min([float(t["unix"].min()), *starts])
    for ax, (series, label) in zip(axes[:, 0], present, strict=True):
        g = t[t["series"] == series]
        keys = [c for c in ("host", "device") if c in g.columns]
        for key, gg in (g.groupby(keys, dropna=False) if keys else [("", g)]):
            ax.plot(gg["unix"] - t0, gg["value"], lw=1, label=str(key))
        for i, st in enumerate(run.steps):
            if st.start_unix is not None and st.end_unix is not None:
                ax.axvspan(st.start_unix - t0, st.end_unix - t0, color="#dde6f5" if i % 2 == 0 else "#eef2f9", zorder=0)
        ax.set_ylabel(label, fontsize=8)
    for st in run.steps:
        if st.start_unix is not None:
            axes[0, 0].annotate(f"{st.level:g}", (st.start_unix - t0, axes[0, 0].get_ylim()[1]), fontsize=7, va="top")
    axes[-1, 0].set_xlabel("seconds since start (bands = steps, labels = level)")
    return _save(fig, out)


# ------------------------------------------------------------------------------ text


TABLE_COLS = [
    ("level", "level", 0), ("achieved_rps", "achieved rps", 2), ("rps", "ok rps", 2), ("goodput_rps", "goodput rps", 2),
    ("requests", "requests", 0), ("error_rate", "error %", None), ("ttft_p50_ms", "TTFT P50", 0),
    ("ttft_p95_ms", "TTFT P95", 0), ("ttft_p99_ms", "TTFT P99", 0), ("itl_p95_ms", "ITL P95", 1),
    ("tpot_p95_ms", "TPOT P95", 1), ("e2e_p50_ms", "E2E P50", 0), ("e2e_p95_ms", "E2E P95", 0),
    ("e2e_p99_ms", "E2E P99", 0), ("output_tokens_per_s", "out tok/s", 0), ("gpu_util_pct", "GPU %", 0),
    ("vram_used_gb", "VRAM GB", 1), ("gpu_temp_max_c", "temp °C", 0), ("gpu_power_w", "power W", 0),
    ("server_waiting", "queue", 1), ("kv_cache_usage_max", "KV max", 2), ("client_cpu_max_pct", "client CPU %", 0),
    ("client_limited", "client-limited", 0), ("slo_pass", "SLO", 0),
]


def _cell(r: dict[str, Any], key: str, digits: int | None) -> str:
    v = r.get(key)
    if key == "error_rate":
        return "–" if v is None else f"{v * 100:.2f}"
    if key == "slo_pass":
        return "pass" if v else "fail"
    return _f(v, digits if digits is not None else 2)


def headline(summary: dict[str, Any]) -> list[str]:
    cap, knee, plan, v = summary["capacity"], summary["knee"], summary["plan"], summary["verdict"]
    lines = [f"Verdict: {DECISION_TEXT[v['decision']]} — " + "; ".join(v["reasons"])]
    if cap.get("per_node_rps") is not None:
        lim = f", limited by {cap['limiting_slo']}" if cap.get("limiting_slo") else ""
        lines.append(f"Capacity per node under the SLO: {cap['per_node_rps']:.3g} rps ({cap['method']}{lim}; "
                     f"last pass {_f(cap.get('last_pass_level'), 0)}, first fail {_f(cap.get('first_fail_level'), 0)})")
    else:
        lines.append(f"Capacity per node under the SLO: unknown ({cap.get('method')})")
    if knee.get("value") is not None:
        lines.append(f"Knee: {knee['value']:g} {knee['unit']} (bracket {knee['bracket'][0]:g}–{knee['bracket'][1]:g}, "
                     f"{knee['method']}, confidence {knee['confidence']}): {knee['reason']}")
    else:
        lines.append(f"Knee: none — {knee['reason']}")
    if plan.get("nodes") is not None:
        lines.append(f"Plan: {plan['nodes']} node(s) = ceil({plan['peak_qps']:g} × {plan['safety_factor']:g} / "
                     f"{cap['per_node_rps']:.3g}) + {plan['redundancy']}; {plan['gpus']} GPU(s)")
    if plan.get("gpus_by_concurrency") is not None:
        lines.append(f"By concurrency: {plan['peak_concurrency']:g} / {plan['per_gpu_concurrency']:.3g} per GPU "
                     f"→ {plan['gpus_by_concurrency']} GPU(s)")
    c = summary["cost"]
    if c.get("per_1k_requests_usd") is not None:
        lines.append(f"Cost: {c['per_1k_requests_usd']:.4g} USD / 1k requests, "
                     f"{_f(c.get('per_1m_output_tokens_usd'), 3)} USD / 1M output tokens, "
                     f"{_f(c.get('per_effective_output_usd'), 5)} USD per effective output")
    return lines


def markdown(summary: dict[str, Any]) -> str:
    out = [f"# Capacity analysis{': ' + summary['name'] if summary.get('name') else ''}", ""]
    out += [f"- {line}" for line in headline(summary)]
    for n in summary["capacity"].get("notes", []) + summary["plan"].get("notes", []):
        out.append(f"- note: {n}")
    if summary["verdict"]["bottleneck_hints"]:
        out.append(f"- bottleneck: {summary['verdict']['bottleneck']} — " + "; ".join(summary["verdict"]["bottleneck_hints"]))
    for w in summary["warnings"]:
        out.append(f"- warning: {w}")
    out += ["", "## Load table", ""]
    cols = [c for c in TABLE_COLS if any(r.get(c[0]) is not None for r in summary["steps"])]
    out.append("| " + " | ".join(c[1] for c in cols) + " | conclusion |")
    out.append("|" + "---|" * (len(cols) + 1))
    for r in summary["steps"]:
        out.append("| " + " | ".join(_cell(r, k, d) for k, _, d in cols) + f" | {r.get('conclusion', '')} |")
    out += ["", "## Checklist", ""]
    for item in summary["checklist"]:
        mark = {"pass": "x", "fail": " ", "needs_human": "?"}[item["status"]]
        out.append(f"- [{mark}] {item['text']} — **{item['status']}**: {item['evidence']}")
    st = summary.get("stability") or {}
    out += ["", "## Stability", "", "- " + "; ".join(st.get("findings", []))]
    return "\n".join(out) + "\n"


def _img(data: bytes | None, alt: str) -> str:
    if not data:
        return ""
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}"/></figure>'


def html_page(summary: dict[str, Any], figs: dict[str, bytes | None]) -> str:
    e = html.escape
    v = summary["verdict"]
    head = headline(summary)
    cols = [c for c in TABLE_COLS if any(r.get(c[0]) is not None for r in summary["steps"])]
    trs = "".join(
        "<tr" + ("" if r["valid"] else ' class="invalid"') + ">"
        + "".join(f"<td>{e(_cell(r, k, d))}</td>" for k, _, d in cols) + f"<td class=l>{e(r.get('conclusion', ''))}</td></tr>"
        for r in summary["steps"]
    )
    checklist = "".join(
        f"<tr class='{i['status']}'><td>{e(i['id'])}</td><td class=l>{e(i['text'])}</td><td>{e(i['status'])}</td>"
        f"<td class=l>{e(i['evidence'])}</td></tr>" for i in summary["checklist"]
    )
    notes = summary["capacity"].get("notes", []) + summary["plan"].get("notes", []) + summary["warnings"]
    plan = summary["plan"]
    plan_rows = "".join(f"<tr><td class=l>{e(k)}</td><td>{e(_f(plan.get(k), 2))}</td></tr>" for k in (
        "peak_qps", "safety_factor", "redundancy", "current_nodes", "nodes", "gpus_per_node", "gpus",
        "peak_concurrency", "per_gpu_concurrency", "gpus_by_concurrency", "peak_share_of_current_capacity"))
    cost_rows = "".join(f"<tr><td class=l>{e(k)}</td><td>{e(_f(summary['cost'].get(k), 5))}</td></tr>" for k in (
        "gpu_hour_usd", "per_1k_requests_usd", "per_1m_output_tokens_usd", "per_effective_output_usd"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Capacity report {e(summary.get('name') or '')}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}}
.verdict{{padding:1em;border-radius:6px;color:#fff;background:{DECISION_COLOUR[v['decision']]}}}
.verdict h1{{margin:0 0 .3em 0}} table{{border-collapse:collapse;font-size:13px;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} td.l,th.l{{text-align:left}}
tr.invalid{{color:#888;text-decoration:line-through}} tr.fail td{{background:#fde8e8}}
tr.needs_human td{{background:#fff6d6}} tr.pass td{{background:#e8f6ec}} img{{max-width:100%}}
</style></head><body>
<div class="verdict" id="verdict" data-decision="{e(v['decision'])}"><h1>{e(DECISION_TEXT[v['decision']])}</h1>
<div>{'<br>'.join(e(r) for r in v['reasons'])}</div>
<div>Bottleneck: {e(v['bottleneck'])}{' — ' + e('; '.join(v['bottleneck_hints'])) if v['bottleneck_hints'] else ''}</div>
{('<div>Measure next: ' + e('; '.join(v['measure_next'])) + '</div>') if v['measure_next'] else ''}</div>
<ul>{''.join(f'<li>{e(h)}</li>' for h in head[1:])}</ul>
{('<ul class="notes">' + ''.join(f'<li>{e(n)}</li>' for n in notes) + '</ul>') if notes else ''}
<h2>Throughput and latency against load</h2>{_img(figs.get('throughput_latency'), 'throughput and latency vs load')}
<h2>Latency distributions per step</h2>{_img(figs.get('latency_distributions'), 'TTFT and E2E per step')}
{('<h2>GPU and queue timeline</h2>' + _img(figs.get('timeline'), 'GPU and queue timeline')) if figs.get('timeline') else '<p>No telemetry in this run.</p>'}
<h2>Load table</h2>
<table><tr>{''.join(f'<th>{e(c[1])}</th>' for c in cols)}<th class=l>conclusion</th></tr>{trs}</table>
<h2>Plan</h2><table>{plan_rows}</table>
<h2>Cost</h2><table>{cost_rows}</table>
<h2>Checklist (seed review and preconditions)</h2>
<table><tr><th>id</th><th class=l>item</th><th>status</th><th class=l>evidence</th></tr>{checklist}</table>
<h2>Stability</h2><p>{e('; '.join((summary.get('stability') or {}).get('findings', [])))}</p>
</body></html>
"""


def write_reports(summary: dict[str, Any], run: RunData, out_dir: Path) -> None:
    figs: dict[str, bytes | None] = {
        "throughput_latency": plot_throughput_latency(summary, out_dir / "throughput_latency.png"),
        "latency_distributions": plot_distributions(run, summary, out_dir / "latency_distributions.png"),
        "timeline": plot_timeline(run, out_dir / "timeline.png"),
    }
    (out_dir / "summary.md").write_text(markdown(summary), encoding="utf-8")
    (out_dir / "report.html").write_text(html_page(summary, figs), encoding="utf-8")
