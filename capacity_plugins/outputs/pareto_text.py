"""The Pareto view (analysis/pareto.py) drawn and in words: report.html's plot of output tokens/s per
GPU against per user, the frontier joined, the SLO's region shaded; summary.md's table of the
points. `pareto_png` draws any number of series on one plot: `capacity matrix` passes one per entry."""

from __future__ import annotations

import base64
import html

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from capacity_plugins.contracts.pareto import Pareto, ParetoPoint
from capacity_plugins.contracts.summary import Summary
from capacity_plugins.outputs.numbers import fmt_iv, fmt_level
from capacity_plugins.outputs.report import png
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

HEADERS = ["load level", "output tok/s per GPU", "tok/s per user (P95)", "tok/s per user (median)", "SLO", "frontier"]


def _cells(p: ParetoPoint) -> list[str]:
    slo = {True: "pass", False: "fail", None: "—"}[p.slo_pass] + ("" if p.valid else " (invalid)")
    return [fmt_level(p.level), fmt_iv(p.per_gpu_tok_s, p.per_gpu_tok_s_ci), fmt_iv(p.per_user_tok_s, p.per_user_tok_s_ci),
            fmt_iv(p.per_user_median_tok_s), slo, "◆" if p.frontier else ""]


def pareto_png(series: dict[str, list[ParetoPoint]], slo_per_user: float | None, gpus_label: str) -> bytes:
    """Each series' points (label = level), its frontier joined; points that missed the SLO hollow;
    the SLO's region (per user ≥ the bound) shaded."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (name, points) in enumerate(series.items()):
        colour = f"C{i % 10}"
        shown = [(float(p.per_gpu_tok_s), float(p.per_user_tok_s), p) for p in points
                 if p.per_gpu_tok_s is not None and p.per_user_tok_s is not None]
        for x, y, p in shown:
            ax.scatter(x, y, s=36, color=colour if p.slo_pass else "none", edgecolors=colour,
                       alpha=1.0 if p.valid else 0.4, zorder=3)
            ax.annotate(fmt_level(p.level), (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        front = sorted((x, y) for x, y, p in shown if p.frontier)
        if front:
            ax.plot([x for x, _ in front], [y for _, y in front], color=colour, lw=1.5,
                    label=f"{name} frontier" if name else "frontier", zorder=2)
    if slo_per_user is not None:
        ax.axhspan(slo_per_user, max(ax.get_ylim()[1], slo_per_user * 1.2), color="#1a7f37", alpha=0.08,
                   label=f"SLO region (≥ {slo_per_user:.3g} tok/s per user)", zorder=0)
        ax.axhline(slo_per_user, color="#1a7f37", lw=0.8, ls="--")
    ax.set_xlabel(f"output tokens/s per GPU ({gpus_label})")
    ax.set_ylabel("output tokens/s per user (1000 / TPOT P95)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("Interactivity against throughput (filled: SLO met; labels: level)", fontsize=9)
    return png(fig)


def _pareto(summary: Summary) -> Pareto:
    assert summary.pareto is not None  # asked only when the summary has the section
    return summary.pareto


def _gpus(p: Pareto) -> str:
    return f"÷ {p.gpus} GPUs behind the URL" if p.gpus > 1 else "one GPU"


@report_section("pareto")
class ParetoReport(ReportSection):
    def markdown(self, summary: Summary) -> list[str]:
        p = _pareto(summary)
        return (["", "## Pareto: interactivity against throughput", "", f"- {p.line}",
                 f"- per GPU: {_gpus(p)}; per user: 1000 ÷ TPOT P95 (the rate 95 % of requests decoded at least at)"
                 + (f"; the SLO's TPOT limit means ≥ {p.slo_per_user_tok_s:.3g} tok/s per user"
                    if p.slo_per_user_tok_s else ""), "(the plot is in report.html)", ""]
                + md_table(HEADERS, [_cells(x) for x in p.points]))

    def html(self, summary: Summary) -> str:
        p = _pareto(summary)
        data = pareto_png({"": p.points}, p.slo_per_user_tok_s, _gpus(p))
        return (f'<h2>Pareto: interactivity against throughput</h2><p id="pareto">{html.escape(p.line)}</p>'
                f'<figure><img alt="output tokens/s per user against per GPU, per step" '
                f'src="data:image/png;base64,{base64.b64encode(data).decode()}"/></figure>'
                + html_table(HEADERS, [("" if x.valid else "invalid", _cells(x)) for x in p.points],
                             attrs=' id="pareto-points"'))
