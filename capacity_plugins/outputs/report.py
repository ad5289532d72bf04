"""report.html (one self-contained page, PNGs embedded as base64) and its plots, rendered to text and
bytes (outputs/writers.py writes them to files).

Matplotlib with the Agg backend: no display, no browser needed to render. The words (headline,
run facts, table cells, summary.md) are report_text.py's.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import LogFormatter

from capacity_plugins.analysis import distributions
from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.analysis.load import RunData
from capacity_plugins.contracts.summary import StepSummary, Summary
from capacity_plugins.outputs import sections
from capacity_plugins.outputs.numbers import fmt_level
from capacity_plugins.outputs.report_text import (
    DECISION_TEXT,
    TTFT_LEGEND,
    alert_lines,
    cell,
    decision_lines,
    detail_lines,
    facts_lines,
    setting_value,
    short_columns,
    table_columns,
)
from capacity_plugins.outputs.report_ttft import plot_ttft_breakdown, section, tick_rotation
from capacity_plugins.outputs.tables import html_table

DECISION_COLOUR = {"scale": "#b3261e", "dont_scale_yet": "#1e6b35", "observe": "#8a6d00"}
LATENCY_LINES = (("ttft_p95_ms", "TTFT P95", "C0"), ("e2e_p95_ms", "E2E P95", "C1"), ("tpot_p95_ms", "TPOT P95", "C2"),
                 ("itl_p95_ms", "ITL P95", "C4"))


def slo_label(metric: str, limit_ms: float) -> str:
    """The legend entry of an SLO line: "TTFT P95 SLO ≤ 1.5 s"."""
    return f"{metric} SLO ≤ " + (f"{limit_ms / 1000:g} s" if limit_ms >= 1000 else f"{limit_ms:g} ms")



# ------------------------------------------------------------------------------ plots


def _log_scale(ax: Any, axis: str, base: float = 10) -> None:
    """A log axis labelled with plain numbers (8, 100, 200). Matplotlib's default labels are
    mathtext (10², 2³), whose parser cost ~0.5 s of a big run's analysis for nothing a reader needs."""
    getattr(ax, f"set_{axis}scale")("log", base=base)
    target = getattr(ax, f"{axis}axis")
    target.set_major_formatter(LogFormatter(base=base))
    target.set_minor_formatter(LogFormatter(base=base, labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _legends_below(*axes: Any) -> None:
    """Each axes' legend under the axes and their tick labels, never over the data it names (the SLO
    lines among its entries): placed once the figure is laid out (one draw), below what the x axis takes."""
    axes = tuple(ax for ax in axes if ax.get_legend_handles_labels()[0])
    if not axes:
        return
    axes[0].figure.draw_without_rendering()
    for ax in axes:
        box = ax.get_window_extent()
        below = min([box.y0, *(t.get_window_extent().y0 for t in [*ax.get_xticklabels(), ax.xaxis.label]
                               if t.get_visible() and t.get_text())])
        gap = (box.y0 - below + 6) / max(box.height, 1.0)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -gap), ncol=2, frameon=False)


def png(fig: Any) -> bytes:
    """A figure as PNG bytes (closed afterwards: a report renders many)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _rps_error(r: StepSummary) -> tuple[float, float]:
    """How far below and above a step's throughput its interval reaches (0 without one)."""
    rps = r.rps or 0
    lo, hi = r.rps_ci or [rps, rps]
    return max(rps - (lo or 0), 0), max((hi or 0) - rps, 0)


def throughput_latency_figure(summary: Summary) -> Any:
    """Throughput (with its interval, the knee, the capacity) and the P95 latencies against load, each
    SLO limit a dashed line in its metric's colour, named in the legend."""
    rows = sorted(summary.steps, key=lambda r: r.level)
    unit = "users" if summary.sweep_kind == "concurrency" else "rps offered"
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    ok = [r for r in rows if r.valid]
    bad = [r for r in rows if not r.valid]
    conf = summary.run.confidence
    err = np.array([[_rps_error(r)[0] for r in ok], [_rps_error(r)[1] for r in ok]]).reshape(2, len(ok))
    a1.errorbar([r.level for r in ok], [r.rps or 0 for r in ok], yerr=err, fmt="o-", capsize=3,
                label=f"throughput (ok rps, {conf:.0%} interval)")
    a1.plot([r.level for r in ok], [r.goodput_rps or 0 for r in ok], "s--", label="goodput (SLO met)", alpha=0.7)
    if bad:
        a1.plot([r.level for r in bad], [r.rps or 0 for r in bad], "x", color="grey",
                label="invalid or insufficient (decides nothing)")
    knee = summary.knee
    if knee.value is not None:
        a1.axvline(knee.value, color="#b3261e", ls=":", label=f"knee {fmt_level(knee.value)} ({knee.confidence})")
    cap = summary.capacity.per_node_rps
    if cap:
        k = summary.capacity.replicas_behind_url if summary.capacity.replicas_behind_url is not None else 1
        a1.axhline(cap * k, color="#1e6b35", ls="--", lw=1, label="capacity under SLO")
        ci = summary.capacity.per_node_rps_ci
        if ci:
            a1.axhspan(ci[0] * k, ci[1] * k, color="#1e6b35", alpha=0.12, label="capacity interval")
    a1.set_xlabel(f"load ({unit})")
    a1.set_ylabel("requests / s")
    a1.set_title("Throughput vs load")

    plotted = False
    top_level = sections.slo_lines(summary) is None
    for key, label, colour in LATENCY_LINES:
        # A section judging by SLOs of its own (workload classes): the top-level limits judge nothing drawn.
        limit = getattr(summary.slo, key) if top_level else None
        if key == "itl_p95_ms" and not limit:
            continue  # ITL is drawn when the SLO limits it; TPOT carries the decode speed otherwise
        ys = [getattr(r, key) for r in ok]  # the row field of the same name as the limit
        if any(y is not None and y > 0 for y in ys):
            a2.plot([r.level for r in ok], [np.nan if y is None else y for y in ys], "o-", color=colour, label=label)
            plotted = True
        if limit:  # each limit in its metric's colour, named in the legend
            a2.axhline(limit, ls="--", lw=1.2, color=colour, alpha=0.8, label=slo_label(label, limit))
            plotted = True
    if knee.value is not None:
        a2.axvline(knee.value, color="#b3261e", ls=":")
    if plotted:
        _log_scale(a2, "y")
    a2.set_xlabel(f"load ({unit})")
    a2.set_ylabel("ms")
    a2.set_title("Latency vs load")
    for ax in (a1, a2):
        if rows and min(r.level for r in rows) > 0 and max(r.level for r in rows) / max(min(r.level for r in rows), 1e-9) >= 8:
            _log_scale(ax, "x", base=2)
    _legends_below(a1, a2)  # once the axes are final: below their tick labels
    return fig


def distributions_figure(run: RunData, summary: Summary) -> Any:
    """TTFT and E2E per step as box plots, the SLO limit a dashed line named in the legend."""
    samples = distributions.of_run(run)  # gathered on the analysis's walk over the steps
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    top_level = sections.slo_lines(summary) is None  # workload classes: each class has its own limits
    levels = {s.index: s.level for s in run.steps}
    arms = {s.index: s.arm for s in run.steps}  # a cache probe measures each level twice
    for ax, col, title in ((axes[0], "ttft_ms", "TTFT per step"), (axes[1], "e2e_ms", "E2E per step")):
        data, labels = [], []
        for idx in sorted(levels):
            v = samples[idx][col] if idx in samples else np.empty(0)
            data.append(v if v.size else np.array([np.nan]))
            labels.append(fmt_level(levels[idx]) + (f"\n{arms[idx]}" if arms[idx] else ""))
        if any(np.isfinite(d).any() and np.nanmax(d) > 0 for d in data):
            ax.boxplot(data, whis=(1, 99), showfliers=False)
            ax.set_xticks(range(1, len(labels) + 1), labels, **tick_rotation(labels))
            _log_scale(ax, "y")
        ax.set_title(title + " (whiskers P1–P99)")
        ax.set_xlabel("level")
        ax.set_ylabel("ms")
        limit = (summary.slo.ttft_p95_ms if col == "ttft_ms" else summary.slo.e2e_p95_ms) if top_level else None
        if limit:
            ax.axhline(limit, ls="--", color="#b3261e", lw=1.2, label=slo_label(f"{title.split()[0]} P95", limit))
    _legends_below(*axes)
    return fig


def timeline_figure(run: RunData, simulated: bool = False) -> Any:
    """The server's telemetry over the run, the steps as bands; None without telemetry."""
    t = run.telemetry
    if t is None or t.empty:
        return None
    sim = " (simulated)" if simulated else ""
    want = [("gpu_util_pct", f"GPU util %{sim}"), ("kv_cache_usage", f"KV cache (0–1){sim}"),
            ("server_waiting", f"server queue{sim}"), ("server_running", f"server running{sim}")]
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
            axes[0, 0].annotate(fmt_level(st.level), (st.start_unix - t0, axes[0, 0].get_ylim()[1]), fontsize=7, va="top")
    axes[-1, 0].set_xlabel("seconds since start (bands = steps, labels = level)")
    return fig


def figures(summary: Summary, run: RunData) -> dict[str, bytes | None]:
    """The report's plots as PNG bytes by file stem (None: nothing to plot), rendered once: written as
    PNG files and embedded in report.html."""
    out: dict[str, bytes | None] = {
        "throughput_latency": png(throughput_latency_figure(summary)),
        "latency_distributions": png(distributions_figure(run, summary)),
    }
    timeline = timeline_figure(run, summary.run.simulated)
    out["timeline"] = png(timeline) if timeline is not None else None
    ttft = plot_ttft_breakdown(summary)
    out["ttft_breakdown"] = png(ttft) if ttft is not None else None
    return out


# ------------------------------------------------------------------------------ page


def _img(data: bytes | None, alt: str) -> str:
    if not data:
        return ""
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}"/></figure>'


def _load_tables(summary: Summary) -> str:
    """The short load table a planner reads, then every column folded (and in steps.csv)."""
    def rows(cols: list[tuple[str, str, int | None, str | None]]) -> list[tuple[str, list[str]]]:
        return [("" if r.valid else "invalid", [cell(r, k, d, ci) for k, _, d, ci in cols] + [r.conclusion or ""])
                for r in summary.steps]

    short, full = short_columns(summary), table_columns(summary)
    conf = summary.run.confidence
    return (f"<p>Intervals in brackets ({conf:.0%}); ∞: too few requests to bound that percentile. Struck-through rows "
            "are invalid or insufficient and decide nothing; the conclusion says why.</p>"
            + html_table([c[1] for c in short] + ["conclusion"], rows(short), {len(short)}, ' id="load-table"')
            + f'<details id="full-table"><summary>Every column ({len(full) + 1}) — also in '
              '<a href="steps.csv">steps.csv</a></summary><div class="scroll">'
            + html_table([c[1] for c in full] + ["conclusion"], rows(full), {len(full)})
            + f"<p>{html.escape(TTFT_LEGEND)}</p></div></details>")


def html_page(summary: Summary, figs: dict[str, bytes | None]) -> str:
    e = html.escape
    v = summary.verdict
    alerts = alert_lines(summary)
    checklist = html_table(["id", "item", "status", "evidence"],
                       [(i.status, [i.id, i.text, i.status, i.evidence]) for i in summary.checklist], {1, 3})
    notes = summary.capacity.notes + summary.plan.notes + summary.warnings
    settings = v.settings or []
    settings_html = ('<details id="settings"><summary>Settings that decided this</summary>'
                     + html_table(["setting", "value", "meaning"],
                              [("", [str(x.key), setting_value(x.value), str(x.meaning or "")]) for x in settings],
                              {0, 2})
                     + "</details>") if settings else ""
    li = "".join
    banner = ('<div class="alerts" id="alerts">' + li(f"<div>{e(a)}</div>" for a in alerts) + "</div>") if alerts else ""
    name = summary.name or ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Capacity report {e(name)}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em auto;padding:0 2em;max-width:1200px;color:#222;overflow-wrap:anywhere}}
h1.title{{font-size:1.1em;font-weight:600;color:#555;margin:0 0 .4em 0}}
p.answer{{font-size:1.45em;font-weight:600;line-height:1.35;margin:0 0 .8em 0;padding:.5em .8em;
  border-left:8px solid {DECISION_COLOUR[v.decision]};background:#f6f6f6}}
.verdict{{padding:.6em 1em;border-radius:6px;color:#fff;background:{DECISION_COLOUR[v.decision]}}}
.verdict h2{{margin:0 0 .3em 0}} .verdict ul{{margin:.2em 0}}
.alerts{{padding:.8em 1em;border:2px solid #b3261e;border-radius:6px;background:#fde8e8;margin-bottom:1em;font-weight:600}}
table{{border-collapse:collapse;font-size:13px;margin:1em 0}}
table{{overflow-wrap:break-word}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} td.l,th.l{{text-align:left}}
#load-table td,#full-table td{{white-space:nowrap}} #load-table td.l{{white-space:normal;min-width:16em}}
#full-table td.l{{white-space:normal;min-width:28em}}
tr.invalid{{color:#888;text-decoration:line-through}} tr.fail td{{background:#fde8e8}}
tr.needs_human td{{background:#fff6d6}} tr.pass td{{background:#e8f6ec}}
figure{{margin:0}} img{{max-width:100%;height:auto}} .scroll{{overflow-x:auto}}
details{{margin:.6em 0}} summary{{cursor:pointer;font-weight:600}}
</style></head><body>
<h1 class="title">Capacity report{': ' + e(name) if name else ''}</h1>
<p class="answer" id="answer">{e(plain_answer(summary))}</p>
{banner}
<div class="verdict" id="verdict" data-decision="{e(v.decision)}"><h2>{e(DECISION_TEXT[v.decision])}</h2>
<ul id="reasons">{li(f'<li>{e(r)}</li>' for r in decision_lines(summary))}</ul></div>
{settings_html}
<h2>Details</h2><ul id="details">{li(f'<li>{e(h)}</li>' for h in detail_lines(summary))}</ul>
{('<ul class="notes">' + li(f'<li>{e(n)}</li>' for n in notes) + '</ul>') if notes else ''}
<h2>Run</h2><ul class="facts" id="facts">{li(f'<li>{e(line)}</li>' for line in facts_lines(summary))}</ul>
{sections.html(summary)}
<h2>Throughput and latency against load</h2>{_img(figs.get('throughput_latency'), 'throughput and latency vs load')}
<h2>Load table</h2>
{_load_tables(summary)}
<h2>Latency distributions per step</h2>{_img(figs.get('latency_distributions'), 'TTFT and E2E per step')}
{section(summary, _img(figs.get('ttft_breakdown'), 'where TTFT goes, per step'))}
{('<h2>GPU and queue timeline</h2>' + _img(figs.get('timeline'), 'GPU and queue timeline')) if figs.get('timeline') else '<p>No telemetry in this run.</p>'}
<details id="checklist"><summary>Checklist (seed review and preconditions)</summary><div class="scroll">{checklist}</div></details>
<h2>Stability</h2><p>{e('; '.join(summary.stability.findings))}</p>
</body></html>
"""

