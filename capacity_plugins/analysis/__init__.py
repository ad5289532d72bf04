"""The post-processor's computing half: a results folder in, a capacity decision out (never imports
Locust, never renders).

    from capacity_plugins.analysis.pipeline import load_run, summarise
    summary = summarise(load_run(Path("results/run1"), {"peak_qps": 300}))

The summary is a `Summary` (a repeat set's, from `repeats.summarise_repeats`, a `RepeatSetSummary`:
contracts/summary.py, every key in docs/results-schema.md); `summary.outcome.decision_complete`
false means the decision could not be completed (`analysis.outcome.exit_code` maps it to exit 1).
Writing the files (summary.json, summary.md, report.html, the PNGs) is outputs/'s: most callers
want `capacity_plugins.analyze`, which does both.
"""
