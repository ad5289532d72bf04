"""Outputs: an analysed run written for people and tools, by registered writers (outputs/registry.py).

    from capacity_plugins import analyze
    summary = analyze(Path("results/run1"), overrides={"peak_qps": 300}, progress=print)

`analyze` is the one place both halves meet: analysis/ computes the summary (it never imports this
package), then every registered writer writes its format into the folder — summary.json, steps.csv,
summary.md, the PNGs, report.html (outputs/writers.py). The renderers (report.py, report_text.py,
repeats_report.py, ...) return text and bytes; `capacity analyze`, `capacity run` and `capacity
matrix` call `analyze`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity_plugins.contracts.summary import AnySummary, RepeatSetSummary, Summary


def analyze(results_dir: Path, *, overrides: dict | None = None, progress: Callable[[str], None] | None = None,
            formats: Iterable[str] | None = None, out: Path | None = None) -> AnySummary:
    """Analyse `results_dir` (a run, or a repeat set); write summary.json, summary.md, report.html and
    PNGs there, or into `out` (a what-if with other SLO / capacity figures leaves the run's own files
    alone); return the summary.

    :param overrides: SLOConfig / CapacityConfig field values that win over the scenario's
        (e.g. ``{"peak_qps": 300, "ttft_p95_ms": 1500}``); None values are ignored.
    :param progress: optional ``callable(str)`` receiving progress lines.
    :param formats: the registered outputs to write (``["json"]``: summary.json only); None: all.
    :raises capacity_plugins.errors.UserError: missing or corrupt inputs (one line), before any file
        is written.
    """
    from capacity_plugins.analysis.repeats import is_repeat_set

    if is_repeat_set(Path(results_dir)):  # `capacity run --repeat N` hands over the set's folder
        return analyze_set(Path(results_dir), overrides=overrides, progress=progress, formats=formats, out=out)
    return _analyze_run(Path(results_dir), overrides, progress, formats, out)


def _analyze_run(results_dir: Path, overrides: dict | None, progress: Callable[[str], None] | None,
                 formats: Iterable[str] | None, out: Path | None) -> Summary:
    from capacity_plugins.analysis.pipeline import load_run, summarise

    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    run = load_run(results_dir, overrides, say)
    summary = summarise(run, say)
    # the renderers (matplotlib) once there is something to render: bad input fails before
    from capacity_plugins.outputs import writers
    from capacity_plugins.outputs.registry import Analysed

    dest = Path(out) if out is not None else results_dir
    dest.mkdir(parents=True, exist_ok=True)
    names = None if formats is None else list(formats)
    if names != ["json"]:
        say("writing report.html, summary.md and plots")
    writers.write(Analysed(summary, run), dest, names)
    say(f"analysis done in {time.perf_counter() - t0:.1f} s")
    return summary


def analyze_set(set_dir: Path, *, overrides: dict | None = None, progress: Callable[[str], None] | None = None,
                formats: Iterable[str] | None = None, out: Path | None = None) -> RepeatSetSummary:
    """Analyse every repeat of a repeat set, then write each repeat's outputs into its folder and the
    set's summary.json / summary.md / report.html into the set (or `out`, with one sub-folder per
    repeat: a what-if leaves the set as it was)."""
    from capacity_plugins.analysis.load import load_run
    from capacity_plugins.analysis.repeats import summarise_repeats

    say = progress or (lambda _m: None)
    summary, repeats = summarise_repeats(Path(set_dir), overrides, say)
    from capacity_plugins.outputs import writers
    from capacity_plugins.outputs.registry import Analysed

    dest = Path(out) if out is not None else Path(set_dir)
    names = None if formats is None else list(formats)
    for folder, s in repeats:
        where = dest / folder.name
        where.mkdir(parents=True, exist_ok=True)
        if names == ["json"]:  # summary.json only (--no-report): the records need not be read again
            writers.write(Analysed(s), where, names)
            continue
        say(f"writing {folder.name}/report.html")
        # the plots read the records again: one repeat's data in memory at a time
        writers.write(Analysed(s, load_run(folder, overrides)), where, names)
    dest.mkdir(parents=True, exist_ok=True)
    writers.write(Analysed(summary), dest, names, of="set")
    return summary
