"""`capacity analyze RESULTS_DIR [options]`: flags override the scenario's `slo` and `capacity`.

Exit codes (docs/exit-codes.md): 0 done, 2 bad input (one line), 3 an opt-in gate failed:
`--fail-on-slo` fails when the SLO does not hold where it must — with a forecast peak, when the
current fleet's capacity under the SLO (capacity per node × current nodes, or 1 node) is below the
peak; without one, when any valid step missed the SLO (a peak rehearsal that failed).
`--fail-on-verdict D` fails when the verdict is D (e.g. `scale`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from capacity_plugins.analysis.gate import gate
from capacity_plugins.errors import EXIT_GATE_FAILED, CommandParser


def _add_overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("capacity (override the scenario's capacity section)")
    g.add_argument("--peak-qps", type=float, help="forecast peak requests/s")
    g.add_argument("--peak-concurrency", type=float, help="forecast peak concurrent requests")
    g.add_argument("--safety-factor", type=float, help="multiplier on the peak (default 1.5)")
    g.add_argument("--redundancy", type=int, help="extra nodes (N+k; default 1)")
    g.add_argument("--current-nodes", type=int, help="nodes serving today")
    g.add_argument("--replicas-behind-url", type=int, help="nodes behind the measured URL (default 1)")
    g.add_argument("--gpus-per-node", type=int, help="GPUs per node (default 1)")
    g.add_argument("--gpu-hour-usd", type=float, help="price of one GPU-hour")
    s = p.add_argument_group("SLO (override the scenario's slo section)")
    s.add_argument("--ttft-p95-ms", type=float)
    s.add_argument("--tpot-p95-ms", type=float)
    s.add_argument("--e2e-p95-ms", type=float)
    s.add_argument("--itl-p95-ms", type=float)
    s.add_argument("--attainment", type=float, help="share of requests that must meet each limit (default 0.95)")
    s.add_argument("--error-rate", type=float, help="highest error rate a passing step may have (default 0.01)")


OVERRIDE_KEYS = ("peak_qps", "peak_concurrency", "safety_factor", "redundancy", "current_nodes", "replicas_behind_url",
                 "gpus_per_node", "gpu_hour_usd", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms", "itl_p95_ms",
                 "attainment", "error_rate")


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity analyze", description="Analyse a results folder: knee, capacity under SLO, plan, verdict.")
    p.add_argument("results_dir", type=Path)
    _add_overrides(p)
    p.add_argument("--format", choices=("text", "json", "md"), default="text", help="what to print (files are always written)")
    p.add_argument("--no-report", action="store_true", help="write summary.json only (no HTML / PNG / Markdown)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--progress", action="store_true", help="progress lines from the start (default: after 1 s)")
    p.add_argument("--fail-on-slo", action="store_true", help="exit 3 when the SLO does not hold (see module docs)")
    p.add_argument("--fail-on-verdict", choices=("scale", "observe", "dont_scale_yet"), help="exit 3 on this verdict")
    return p


def main(argv: list[str] | None = None) -> int:
    from capacity_plugins.analysis.load import dumps_json
    from capacity_plugins.analysis.pipeline import analyze
    from capacity_plugins.analysis.report import headline, markdown

    args = build_parser().parse_args(argv)
    overrides = {k: getattr(args, k) for k in OVERRIDE_KEYS if getattr(args, k) is not None}

    t0 = time.monotonic()
    held: list[str] = []

    def progress(msg: str) -> None:
        # Short analyses stay silent (an error then is the only line); long ones show where they are.
        if args.quiet:
            return
        held.append(msg)
        if args.progress or time.monotonic() - t0 > 1.0:
            for m in held:
                print(f"[analyze] {m}", file=sys.stderr, flush=True)
            held.clear()

    from capacity_plugins.analysis import pipeline

    if args.no_report:
        summary = pipeline.analyze(args.results_dir, overrides=overrides, progress=progress, report=False)
    else:
        summary = analyze(args.results_dir, overrides=overrides, progress=progress)
    try:
        _print_summary(args, summary, dumps_json, markdown, headline)
    except BrokenPipeError:  # `capacity analyze … | head`: the reader left, the files are written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    failed = gate(summary, args.fail_on_slo, args.fail_on_verdict)
    for f in failed:
        print(f"capacity analyze: {f}", file=sys.stderr)
    return EXIT_GATE_FAILED if failed else 0


def _print_summary(args, summary, dumps_json, markdown, headline) -> None:
    if args.format == "json":
        print(dumps_json(summary))
    elif args.format == "md":
        print(markdown(summary))
    else:
        print("\n".join(headline(summary)))
        for w in summary["warnings"]:
            print(f"warning: {w}")
        print(f"report: {args.results_dir / 'report.html'}" if not args.no_report else
              f"summary: {args.results_dir / 'summary.json'}")
    sys.stdout.flush()
