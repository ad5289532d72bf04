"""report.html's "Where TTFT goes": one stacked bar per step (queue / prefill / rest of the server's
TTFT / client remainder), from the breakdown columns of the load table (analysis/ttft_breakdown.py).

Each bar is the client TTFT mean. A part the server does not export is left out and what it hid is
drawn as one grey "not attributed" segment, so a bar never claims more than the data says. Parts
that come out negative as measured (means of slightly different requests) are drawn as 0.
"""

from __future__ import annotations

import html
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from capacity_plugins.contracts.summary import StepSummary, Summary
from capacity_plugins.outputs.numbers import fmt_level, fmt_num

SEGMENTS = (("queue", "server queue", "#b3261e"), ("prefill", "prefill", "#1f5fa8"),
            ("server_rest", "rest of the server's TTFT", "#7ea6d8"),
            ("client_rest", "client remainder (network + client)", "#f2a900"),
            ("unattributed", "not attributed (the server exports no TTFT)", "#c8c8c8"))


def tick_rotation(labels: list[str], room: int = 48) -> dict[str, Any]:
    """Turn a category axis's labels upright when side by side they would not fit (about `room` characters):
    on its side a label is as wide as its lines are tall, so neighbours never overlap."""
    longest = max((len(line) for lab in labels for line in lab.split("\n")), default=0)
    return {"rotation": 90, "ha": "center"} if len(labels) * (longest + 1) > room else {}


def segments(row: StepSummary) -> dict[str, float] | None:
    """The bar of one step (ms), or None when its server parts are all unknown."""
    client = row.client_ttft_mean_ms
    queue, prefill, server = row.server_queue_mean_ms, row.server_prefill_mean_ms, row.server_ttft_mean_ms
    if client is None or (queue is None and prefill is None and server is None):
        return None
    known = (queue or 0.0) + (prefill or 0.0)
    out = {"queue": queue or 0.0, "prefill": prefill or 0.0}
    if server is not None:
        out["server_rest"] = max(server - known, 0.0)
        out["client_rest"] = max(client - server, 0.0)
    else:
        out["unattributed"] = max(client - known, 0.0)
    return {k: max(v, 0.0) for k, v in out.items()}


def plot_ttft_breakdown(summary: Summary) -> Any | None:
    """The figure (shares of each step's TTFT, and the same bars in ms), or None when no step has a
    server part. The shares show the composition at every level; the ms show how much there is."""
    rows = [(r, s) for r in summary.steps if (s := segments(r)) is not None]
    if not rows:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.4))
    # A bar per step: a cache probe measures each level twice, and equal labels would share one bar.
    labels = [fmt_level(r.level) + (f"\n{r.arm}" if r.arm else "") for r, _ in rows]
    totals = [sum(s.values()) or 1.0 for _, s in rows]
    bottom_share, bottom_ms = [0.0] * len(rows), [0.0] * len(rows)
    for key, label, colour in SEGMENTS:
        ms = [s.get(key, 0.0) for _, s in rows]
        if not any(ms):
            continue
        share = [100.0 * m / t for m, t in zip(ms, totals, strict=True)]
        hatch = "//" if key == "unattributed" else None
        a1.bar(labels, share, bottom=bottom_share, color=colour, label=label, hatch=hatch)
        a2.bar(labels, ms, bottom=bottom_ms, color=colour, hatch=hatch)
        bottom_share = [b + h for b, h in zip(bottom_share, share, strict=True)]
        bottom_ms = [b + h for b, h in zip(bottom_ms, ms, strict=True)]
    # Each bar's total once, over the ms bar it measures; upright when the bars leave room, else turned
    # on its side (one label per bar never overlaps its neighbours). The client remainder is its own
    # segment and a load-table column, not a second line of text over every bar.
    upright = len(rows) <= 8 and not any(r.arm for r, _ in rows)
    for i, (r, _) in enumerate(rows):
        a2.annotate(fmt_num(r.client_ttft_mean_ms, unit=" ms" if upright else ""), (i, bottom_ms[i]),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                    rotation=0 if upright else 90)
    a2.set_ylim(0, max(bottom_ms) * (1.12 if upright else 1.3) or 1.0)
    sim = " (server parts simulated)" if summary.run.simulated else ""
    a1.set_title(f"Where TTFT goes: share of each step's TTFT{sim}", fontsize=10)
    a1.set_ylabel("% of the client TTFT mean")
    a1.set_ylim(0, 100)
    a2.set_title("the same, ms (bar = client TTFT mean" + (")" if upright else ", ms over each bar)"), fontsize=10)
    a2.set_ylabel("ms")
    rot = tick_rotation(labels, room=40)
    for ax in (a1, a2):
        ax.set_xlabel("level")
        if rot:
            ax.tick_params(axis="x", labelrotation=rot["rotation"])
            for t in ax.get_xticklabels():
                t.set_ha(rot["ha"])
    handles, names = a1.get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(handles, names, fontsize=8, loc="lower center", ncol=min(len(names), 3), frameon=False)
    return fig


def section(summary: Summary, figure_html: str) -> str:
    """The report's section: the bars, what they are, and what the server does not export (once)."""
    e = html.escape
    notes = summary.ttft_breakdown.notes
    items = "".join(f"<li>{e(n)}</li>" for n in notes)
    if not figure_html:
        return f"<h2>Where TTFT goes</h2><ul class=\"ttft-notes\">{items}</ul>" if notes else ""
    return ("<h2>Where TTFT goes</h2>" + figure_html
            + "<p>Means over each step's measured window, from the server's own histograms: queue, prefill and "
              "the rest of the server's TTFT; the client remainder is the client's TTFT mean minus the server's "
              "(network and client). The columns of the same names are in the load table.</p>"
            + (f"<ul class=\"ttft-notes\">{items}</ul>" if items else ""))
