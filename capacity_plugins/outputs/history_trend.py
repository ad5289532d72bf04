"""The catalog's trend (`capacity history trend`): capacity per node with its interval, and the SLO
latencies at a level every plotted run measured, over the runs — trend.png and a self-contained
trend.html (the PNG embedded, the runs' table below it).

Runs are coloured by one label (`--by`, default `build`): a build that lost capacity shows as a
group of points lower than the others, each point's bar its capacity interval (a repeat set's
run-to-run interval; a single run's within-run one).
"""

from __future__ import annotations

import base64
import html
import math
import time
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from capacity_plugins.contracts.history import RunEntry
from capacity_plugins.outputs.report import png
from capacity_plugins.outputs.tables import html_table

SLO_FIGURES = (("ttft_p95_ms", "TTFT P95 ms"), ("e2e_p99_ms", "E2E P99 ms"))


def common_level(runs: Sequence[RunEntry]) -> float | None:
    """The highest level every run measured validly (the SLO latencies are plotted there)."""
    sets = [{s.level for s in r.steps if s.valid} for r in runs]
    both = set.intersection(*sets) if sets else set()
    return max(both) if both else None


def _group(r: RunEntry, by: str) -> str:
    return r.labels.get(by, "(no label)")


def _fmt(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:,.3g}"


def _bar(r: RunEntry) -> tuple[float, float]:
    """How far the capacity interval reaches below and above the point (0 where it has no end)."""
    v = r.capacity_rps or 0.0
    lo = v - r.capacity_lo if r.capacity_lo is not None else 0.0
    hi = r.capacity_hi - v if r.capacity_hi is not None else 0.0
    return max(0.0, lo), max(0.0, hi)


def trend_png(runs: Sequence[RunEntry], by: str) -> bytes:
    level = common_level(runs)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    groups = list(dict.fromkeys(_group(r, by) for r in runs))
    colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(groups)}
    for g in groups:
        xs = [i for i, r in enumerate(runs) if _group(r, by) == g and r.capacity_rps is not None]
        ys = [runs[i].capacity_rps or 0.0 for i in xs]
        ends = [_bar(runs[i]) for i in xs]
        top.errorbar(xs, ys, yerr=[[e[0] for e in ends], [e[1] for e in ends]], fmt="o", capsize=4, color=colours[g], label=f"{by}={g}")
        for fig_key, label in SLO_FIGURES:
            pts = [(i, getattr(next(s for s in runs[i].steps if s.level == level and s.valid), fig_key))
                   for i in range(len(runs)) if _group(runs[i], by) == g and level is not None]
            pts = [(i, v) for i, v in pts if v is not None]
            if pts:
                bottom.plot([p[0] for p in pts], [p[1] for p in pts], "o" if fig_key == "ttft_p95_ms" else "s",
                            color=colours[g], fillstyle="full" if fig_key == "ttft_p95_ms" else "none",
                            label=f"{label}, {by}={g}")
    top.set_ylabel("capacity per node under SLO (rps)")
    top.set_ylim(bottom=0)
    top.set_title("capacity per run, with its interval")
    top.legend(fontsize=8)
    bottom.set_ylabel("ms")
    bottom.set_title(f"SLO latencies at level {level:g}" if level is not None
                     else "SLO latencies: no level every run measured validly")
    bottom.set_ylim(bottom=0)
    if bottom.has_data():
        bottom.legend(fontsize=7, ncol=2)
    bottom.set_xticks(range(len(runs)), [f"{r.id}" for r in runs], fontsize=8)
    bottom.set_xlabel("run (catalog id), oldest first")
    fig.tight_layout()
    return png(fig)


def trend_html(runs: Sequence[RunEntry], by: str, image: bytes, title: str) -> str:
    e = html.escape
    head = ["id", "kind", by, "started (UTC)", "capacity rps", "interval", "knee", "verdict", "engine", "results"]
    rows = []
    for r in runs:
        ci = f"[{_fmt(r.capacity_lo)}, {_fmt(r.capacity_hi)}]" if r.capacity_lo is not None else "–"
        started = "–" if r.started_unix is None else _utc(r.started_unix)
        engine = " ".join(x for x in (r.engine, r.engine_version) if x) or "–"
        rows.append(("", [str(r.id), r.kind, _group(r, by), started, _fmt(r.capacity_rps), ci, _fmt(r.knee),
                          r.verdict or "–", engine, r.results_dir]))
    return ("<!doctype html><html><head><meta charset=utf-8><title>" + e(title) + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
            ".l{text-align:left}</style></head><body>"
            f"<h1>{e(title)}</h1><p>{len(runs)} runs, coloured by the label <code>{e(by)}</code>.</p>"
            f'<img alt="capacity trend" src="data:image/png;base64,{base64.b64encode(image).decode()}">'
            + html_table(head, rows, left={1, 2, 3, 7, 8, 9}) + "</body></html>\n")


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
