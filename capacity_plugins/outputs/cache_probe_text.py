"""A prefix-cache probe (analysis/cache_probe.py) in words: its report section and per-level table,
shared by summary.md and report.html."""

from __future__ import annotations

from typing import Any

from capacity_plugins.analysis.cache_probe import COMPARED


def section_lines(probe: dict[str, Any]) -> list[str]:
    """The report's "Prefix-cache probe" section, as lines (summary.md and report.html)."""
    arm = probe.get("arm") or "cache"
    spec = probe.get("spec") or {}
    lines = [f"Answer: {probe['answer']}",
             f"Capacity, knee and plan count the distinct arm only (the corpus's own prompts); the {arm} arm's "
             "steps are shown in the load table but decide nothing."]
    if spec.get("arm") == "shared_prefix" and spec.get("shared_tokens_mean") is not None:
        lines.append(f"The {arm} arm replaces the first {spec['prefix_tokens']} estimated tokens of each corpus prompt "
                     f"with one common prefix, keeping its length: on average {spec['shared_tokens_mean']:.0f} of "
                     f"{spec['prompt_tokens_mean']:.0f} tokens shared; {spec['full_prefix_share']:.0%} of prompts carry "
                     "the whole prefix.")
    elif spec.get("arm") == "repeat":
        lines.append(f"The {arm} arm sends a pool of {spec.get('pool', spec.get('pool_size'))} corpus prompts in turn "
                     "(exact repeats).")
    mdd = probe.get("min_detectable_difference") or 0.0
    lines.append(f"A difference counts beyond the noise when it exceeds both steps' intervals combined plus {mdd:.0%} "
                 "of the distinct arm's value (verdict.min_detectable_difference).")
    return lines + [f"note: {n}" for n in probe.get("notes", [])]


def table(probe: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-level comparison (summary.md and report.html)."""
    head = ["level", "arm", "requests", "TTFT P50 ms", "TTFT P95 ms", "throughput rps", "prompt tokens",
            "cache hit rate"]
    out: list[list[str]] = []

    def num(v: Any, ci: Any = None, digits: int = 0) -> str:
        if v is None:
            return "–"
        text = f"{v:,.{digits}f}"
        if ci:
            lo = "?" if ci[0] is None else f"{ci[0]:,.{digits}f}"
            hi = "∞" if ci[1] is None else f"{ci[1]:,.{digits}f}"
            text += f" ({lo}–{hi})"
        return text

    for e in probe["levels"]:
        for name, a in (("distinct", e["distinct"]), (probe.get("arm") or "cache", e["cache"])):
            if a.get("step") is None:
                out.append([f"{e['level']:g} {e['unit']}", name, "–", "–", "–", "–", "–", "–"])
                continue
            hit = a.get("prefix_cache_hit_rate")
            out.append([f"{e['level']:g} {e['unit']}", name + ("" if a["sound"] else " (unsound)"),
                        str(a["requests"]), num(a["ttft_p50_ms"], a.get("ttft_p50_ci_ms")),
                        num(a["ttft_p95_ms"], a.get("ttft_p95_ci_ms")), num(a["rps"], a.get("rps_ci"), 2),
                        num(a.get("prompt_tokens_mean")), "–" if hit is None else f"{hit:.0%}"])
        if e["deltas"]:
            cells = []
            for key, _ci, _w, _hib in COMPARED:
                d = e["deltas"][key]
                beyond = d["judgement"] in ("cache_flatters", "cache_arm_worse")
                cells.append("–" if d["change"] is None else
                             f"{d['change'] * 100:+.0f} % ({'beyond' if beyond else 'within'} noise)")
            out.append([f"{e['level']:g} {e['unit']}", "change", "", *cells, "", ""])
    return head, out
