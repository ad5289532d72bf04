"""The post-processor: a results folder in, a capacity decision out (never imports Locust).

    from capacity_plugins.analysis import analyze
    summary = analyze(Path("results/run1"), overrides={"peak_qps": 300}, progress=print)

`summary.json`'s keys are documented in SCHEMA.md next to this file. A repeat set (a folder with
`repeats.json`) goes through `analyze_set`; `summary["outcome"]["decision_complete"]` false means
the decision could not be completed (`analysis.outcome.exit_code` maps it to exit 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def analyze(results_dir: Path, *, overrides: dict | None = None, progress=None) -> dict[str, Any]:
    """Analyse `results_dir` (a run, or a repeat set); writes summary.json, summary.md, report.html and PNGs there.

    :param overrides: SLOConfig / CapacityConfig field values that win over the scenario's
        (e.g. ``{"peak_qps": 300, "ttft_p95_ms": 1500}``); None values are ignored.
    :param progress: optional ``callable(str)`` receiving progress lines.
    :raises capacity_plugins.errors.UserError: missing or corrupt inputs (one line).
    """
    from capacity_plugins.analysis.pipeline import analyze as _analyze
    from capacity_plugins.analysis.repeats import analyze_set as _analyze_set
    from capacity_plugins.analysis.repeats import is_repeat_set

    if is_repeat_set(Path(results_dir)):  # `capacity run --repeat N` hands over the set's folder
        return _analyze_set(Path(results_dir), overrides=overrides, progress=progress)
    return _analyze(Path(results_dir), overrides=overrides, progress=progress)


def analyze_set(set_dir: Path, *, overrides: dict | None = None, progress=None) -> dict[str, Any]:
    """Analyse every repeat of a repeat set and write the set's summary.json / summary.md / report.html."""
    from capacity_plugins.analysis.repeats import analyze_set as _analyze_set

    return _analyze_set(Path(set_dir), overrides=overrides, progress=progress)


__all__ = ["analyze", "analyze_set"]
