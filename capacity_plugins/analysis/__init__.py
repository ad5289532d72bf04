"""The post-processor: a results folder in, a capacity decision out (never imports Locust).

    from capacity_plugins.analysis import analyze
    summary = analyze(Path("results/run1"), overrides={"peak_qps": 300}, progress=print)

`summary.json`'s keys are documented in SCHEMA.md next to this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def analyze(results_dir: Path, *, overrides: dict | None = None, progress=None) -> dict[str, Any]:
    """Analyse `results_dir`; writes summary.json, summary.md, report.html and PNGs there; returns the summary.

    :param overrides: SLOConfig / CapacityConfig field values that win over the scenario's
        (e.g. ``{"peak_qps": 300, "ttft_p95_ms": 1500}``); None values are ignored.
    :param progress: optional ``callable(str)`` receiving progress lines.
    :raises capacity_plugins.errors.UserError: missing or corrupt inputs (one line).
    """
    from capacity_plugins.analysis.pipeline import analyze as _analyze

    return _analyze(Path(results_dir), overrides=overrides, progress=progress)


__all__ = ["analyze"]
