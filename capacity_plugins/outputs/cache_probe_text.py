"""A prefix-cache probe (analysis/cache_probe.py) in words: its report section and per-level table,
shared by summary.md and report.html, and its answer in the terminal's headline."""

from __future__ import annotations

import html
from typing import Any

from capacity_plugins.analysis.cache_probe import COMPARED_FIGURES
from capacity_plugins.contracts.summary import CacheProbe, ProbeArm, Summary
from capacity_plugins.outputs.sections import ReportSection, report_section


def section_lines(probe: CacheProbe) -> list[str]:
    """The report's "Prefix-cache probe" section, as lines (summary.md and report.html)."""
    arm = probe.arm or "cache"
    spec = probe.spec
    lines = [f"Answer: {probe.answer}",
             f"Capacity, knee and plan count the distinct arm only (the corpus's own prompts); the {arm} arm's "
             "steps are shown in the load table but decide nothing."]
    if spec is not None and spec.arm == "shared_prefix" and spec.shared_tokens_mean is not None:
        lines.append(f"The {arm} arm replaces the first {spec.prefix_tokens} estimated tokens of each corpus prompt "
                     f"with one common prefix, keeping its length: on average {spec.shared_tokens_mean:.0f} of "
                     f"{spec.prompt_tokens_mean:.0f} tokens shared; {spec.full_prefix_share:.0%} of prompts carry "
                     "the whole prefix.")
    elif spec is not None and spec.arm == "repeat":
        lines.append(f"The {arm} arm sends a pool of {spec.pool if spec.pool is not None else spec.pool_size} corpus "
                     "prompts in turn (exact repeats).")
    mdd = probe.min_detectable_difference or 0.0
    lines.append(f"A difference counts beyond the noise when it exceeds both steps' intervals combined plus {mdd:.0%} "
                 "of the distinct arm's value (verdict.min_detectable_difference).")
    return lines + [f"note: {n}" for n in probe.notes]


def _num(v: Any, ci: Any = None, digits: int = 0) -> str:
    if v is None:
        return "–"
    text = f"{v:,.{digits}f}"
    if ci:
        lo = "?" if ci[0] is None else f"{ci[0]:,.{digits}f}"
        hi = "∞" if ci[1] is None else f"{ci[1]:,.{digits}f}"
        text += f" ({lo}–{hi})"
    return text


def _arm_cells(where: str, name: str, a: ProbeArm) -> list[str]:
    if a.step is None:
        return [where, name, "–", "–", "–", "–", "–", "–"]
    hit = a.prefix_cache_hit_rate
    return [where, name + ("" if a.sound else " (unsound)"), str(a.requests), _num(a.ttft_p50_ms, a.ttft_p50_ci_ms),
            _num(a.ttft_p95_ms, a.ttft_p95_ci_ms), _num(a.rps, a.rps_ci, 2), _num(a.prompt_tokens_mean),
            "–" if hit is None else f"{hit:.0%}"]


def table(probe: CacheProbe) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-level comparison (summary.md and report.html)."""
    head = ["level", "arm", "requests", "TTFT P50 ms", "TTFT P95 ms", "throughput rps", "prompt tokens",
            "cache hit rate"]
    out: list[list[str]] = []
    for e in probe.levels:
        where = f"{e.level:g} {e.unit}"
        out.append(_arm_cells(where, "distinct", e.distinct))
        out.append(_arm_cells(where, probe.arm or "cache", e.cache))
        if e.deltas:
            cells = []
            for key in COMPARED_FIGURES:
                d = e.deltas[key]
                beyond = d.judgement in ("cache_flatters", "cache_arm_worse")
                cells.append("–" if d.change is None else
                             f"{d.change * 100:+.0f} % ({'beyond' if beyond else 'within'} noise)")
            out.append([where, "change", "", *cells, "", ""])
    return head, out


def _probe(summary: Summary) -> CacheProbe:
    assert summary.cache_probe is not None  # asked only when the summary has the section
    return summary.cache_probe


@report_section("cache_probe")
class CacheProbeReport(ReportSection):
    def headline(self, summary: Summary) -> list[str]:
        return [f"Prefix-cache probe: {_probe(summary).answer}"]

    def markdown(self, summary: Summary) -> list[str]:
        """The "Prefix-cache probe" section of summary.md: the answer, how to read it, the arms per level."""
        probe = _probe(summary)
        head, rows = table(probe)
        return (["", "## Prefix-cache probe", ""] + [f"- {line}" for line in section_lines(probe)]
                + ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                + ["| " + " | ".join(r) + " |" for r in rows])

    def html(self, summary: Summary) -> str:
        """The same section in report.html."""
        e = html.escape
        probe = _probe(summary)
        head, rows = table(probe)
        return ('<h2>Prefix-cache probe</h2><ul id="cache-probe">'
                + "".join(f"<li>{e(x)}</li>" for x in section_lines(probe)) + "</ul><table><tr>"
                + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>")
