"""A repeat set's words and page: headline, summary.md, report.html (one plot: every repeat's curve),
rendered to text and bytes (outputs/writers.py writes them).

Each repeat keeps its own full report in its folder; the set's page is about the spread.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.contracts.summary import LevelStats, RepeatSetSummary, SetLevel
from capacity_plugins.outputs.numbers import fmt, fmt_ci, fmt_iv, fmt_level, fmt_num
from capacity_plugins.outputs.report_text import DECISION_TEXT, plan_words


def _g(v: float | None) -> str:
    return fmt_num(v)


def set_headline(s: RepeatSetSummary) -> list[str]:
    cap, knee, plan, v = s.capacity, s.knee, s.plan, s.verdict
    n = len(s.repeats)
    conf = s.verdict_settings.confidence
    lines = [f"Verdict ({n} repeats): {DECISION_TEXT[v.decision]} — " + "; ".join(v.reasons)]
    lines += [f"Decision not completed: {r}" for r in s.outcome.reasons]
    ci = cap.per_node_rps_ci
    kind = "run-to-run" if cap.interval_kind == "run_to_run" else "within-run"
    lines.append(f"Capacity per node under the SLO: {_g(cap.per_node_rps)} rps mean"
                 + (f" [{_g(ci[0])}–{_g(ci[1])}, {conf:.0%} {kind}]" if ci else "")
                 + f"; repeats {', '.join(_g(c) for c in cap.values or [])} (sd {_g(cap.sd)})")
    lines.append(f"Knee per repeat: {', '.join(_g(k) for k in knee.values)}"
                 + (" (all agree)" if knee.agree else f" (spread {_g(knee.min)}–{_g(knee.max)})"))
    words = plan_words(plan, cap)
    if words and (plan.nodes is not None or plan.refused or plan.infeasible):
        lines.append(f"Plan: {words[0]}")
        lines += [w[0].upper() + w[1:] for w in words[1:]]
    return lines


LEVEL_COLS: tuple[tuple[str, Callable[[SetLevel], LevelStats]], ...] = (
    ("ok rps", lambda e: e.rps), ("E2E P95 ms", lambda e: e.e2e_p95_ms), ("E2E P99 ms", lambda e: e.e2e_p99_ms),
    ("TTFT P95 ms", lambda e: e.ttft_p95_ms))


def _level_cells(e: SetLevel) -> list[str]:
    cells = [fmt_level(e.level), f"{len(e.valid_repeats)}/{len(e.valid_repeats) + len(e.invalid_repeats)}"]
    for _, figure in LEVEL_COLS:
        st = figure(e)
        cells.append("–" if st.mean is None else f"{fmt_iv(st.mean, st.ci)} ({fmt_num(st.min)}…{fmt_num(st.max)})")
    spread = e.rps_relative_spread
    cells.append("–" if spread is None else f"{spread:.1%}")
    return cells


def set_markdown(s: RepeatSetSummary) -> str:
    out = [f"# Capacity analysis of a repeat set{': ' + s.name if s.name else ''}", "",
           f"**{plain_answer(s)}**", ""]
    out += [f"- {line}" for line in set_headline(s)]
    out += ["", "## Repeats", "", "| repeat | capacity rps | interval | knee | verdict | nodes | complete |",
            "|---|---|---|---|---|---|---|"]
    for r in s.repeats:
        out.append(f"| {r.name} | {_g(r.per_node_rps)} | {fmt_ci(r.per_node_rps_ci, 2)} | {_g(r.knee)} | "
                   f"{r.decision} | {fmt(r.nodes, 0)} | {fmt(r.decision_complete)} |")
    conf = s.verdict_settings.confidence
    out += ["", "## Run-to-run spread per level", "",
            f"mean [{conf:.0%} t-interval of the mean over the repeats] (min…max)", "",
            "| level | valid repeats | " + " | ".join(c[0] for c in LEVEL_COLS) + " | rps spread |",
            "|" + "---|" * (len(LEVEL_COLS) + 3)]
    for e in s.levels:
        out.append("| " + " | ".join(_level_cells(e)) + " |")
    out += ["", "## Warnings", ""] + [f"- {w}" for w in s.warnings]
    return "\n".join(out) + "\n"


def throughput_plot(s: RepeatSetSummary) -> bytes:
    """Every repeat's throughput curve, as PNG bytes (throughput_repeats.png, embedded in the page)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, name in enumerate(s.run.repeats or []):
        pts = [(e.level, v) for e in s.levels if (v := e.rps.values[i]) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", alpha=0.7, label=name)
    ax.set_xlabel("load level")
    ax.set_ylabel("ok requests / s")
    ax.set_title("Throughput per repeat (valid steps)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def set_page(s: RepeatSetSummary, png: bytes) -> str:
    """The set's report.html: the spread, each repeat linked to its own report, the plot embedded."""
    e = html.escape
    rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in _level_cells(lv)) + "</tr>" for lv in s.levels)
    reps = "".join(f"<tr><td class=l><a href=\"{e(r.name)}/report.html\">{e(r.name)}</a></td><td>{e(_g(r.per_node_rps))}"
                   f"</td><td>{e(fmt_ci(r.per_node_rps_ci, 2))}</td><td>{e(_g(r.knee))}</td><td>{e(r.decision)}</td>"
                   f"<td>{e(fmt(r.nodes, 0))}</td><td>{e(fmt(r.decision_complete))}</td></tr>" for r in s.repeats)
    head = set_headline(s)
    name = s.name or ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Repeat set {e(name)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em auto;padding:0 2em;max-width:1200px;color:#222}}
table{{border-collapse:collapse;font-size:13px;margin:1em 0}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}
td.l,th.l{{text-align:left}} img{{max-width:100%}}</style></head><body>
<h1 style="font-size:1.1em;color:#555">Repeat set{': ' + e(name) if name else ''}</h1>
<p class="answer" id="answer" style="font-size:1.4em;font-weight:600">{e(plain_answer(s))}</p>
<h2 id="verdict" data-decision="{e(s.verdict.decision)}">{e(head[0])}</h2>
<ul>{''.join(f'<li>{e(h)}</li>' for h in head[1:])}</ul>
<h2>Repeats</h2><table><tr><th class=l>repeat</th><th>capacity rps</th><th>interval</th><th>knee</th><th>verdict</th>
<th>nodes</th><th>complete</th></tr>{reps}</table>
<h2>Run-to-run spread per level</h2><p>mean [t-interval of the mean over the repeats] (min…max)</p>
<table><tr><th>level</th><th>valid repeats</th>{''.join(f'<th>{e(c[0])}</th>' for c in LEVEL_COLS)}<th>rps spread</th></tr>{rows}</table>
<figure><img alt="throughput per repeat" src="data:image/png;base64,{base64.b64encode(png).decode()}"/></figure>
<h2>Warnings</h2><ul>{''.join(f'<li>{e(w)}</li>' for w in s.warnings)}</ul>
</body></html>
"""
    return page
