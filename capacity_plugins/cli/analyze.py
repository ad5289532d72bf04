"""`capacity analyze RESULTS_DIR [options]`: flags override the scenario's `slo`, `capacity`, `verdict` and `load` thresholds.

RESULTS_DIR is one run's results folder, or a repeat set (a folder with `repeats.json`).

Exit codes (docs/exit-codes.md, analysis/outcome.py): 0 the analysis completed, whatever the
verdict; 1 the decision could not be completed (no requests recorded, no valid step, the plan
refused, an incomplete run) — everything that can be written still is; 2 bad input or usage, one
line, before any file is written; 3 an opt-in gate failed: `--fail-on-slo` fails when the SLO does
not hold where it must — with a forecast peak, when the current fleet's capacity under the SLO
(capacity per node × current nodes, or 1 node) is below the peak; without one, when any valid step
missed the SLO (a peak rehearsal that failed). `--fail-on-verdict D` fails when the verdict is D.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from capacity_plugins.analysis.gate import gate
from capacity_plugins.analysis.outcome import exit_code
from capacity_plugins.contracts.planning import VerdictConfig
from capacity_plugins.contracts.summary import AnySummary
from capacity_plugins.errors import CommandParser, UserError

VERDICT_HELP = {
    "confidence": "confidence level of every interval (default 0.95)",
    "min_valid_steps": "valid steps the verdict needs (default 3)",
    "gpu_busy_pct": "GPU util %% above which the GPU is busy (scale rule; default 85)",
    "gpu_idle_pct": "GPU util %% below which it idles while the SLO fails (default 30)",
    "gpu_low_pct": "GPU util %% below which it is not saturated (bottleneck hints; default 50)",
    "gpu_hot_c": "GPU temperature (°C) above which it likely throttles (default 85)",
    "queue_idle_max": "server queue below which requests do not wait for the GPU (default 5)",
    "deferred_min": "requests the server defers on average (LoRA adapters beyond --max-loras) from which the "
                    "adapters are the bottleneck (default 1)",
    "kv_cache_full": "KV-cache usage (0-1) at which memory is full (default 0.9)",
    "peak_e2e_p99_ms": "E2E P99 limit at the forecast peak for `scale` (default: the SLO's own limits)",
    "trigger_share": "share of current capacity that triggers planning (default 0.7)",
    "max_capacity_interval": "widest capacity interval, as a share of capacity, the plan sizes from (default 0.5)",
    "min_detectable_difference": "compare: smallest relative change single runs can show (default 0.10)",
    "queue_dominant_share": "share of TTFT spent in the server queue at which queueing dominates (default 0.5)",
    "client_remainder_max_ms": "client TTFT mean - server TTFT mean (network + client) called out above this, ms "
                               "(default 10)",
}


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
    s.add_argument("--first-visible-p95-ms", type=float, help="time to first output token (after any reasoning)")
    s.add_argument("--tpot-visible-p95-ms", type=float, help="TPOT over the visible tokens (after any reasoning)")
    s.add_argument("--attainment", type=float, help="share of requests that must meet each limit (default 0.95)")
    s.add_argument("--error-rate", type=float, help="highest error rate a passing step may have (default 0.01)")
    ld = p.add_argument_group("steps (override the scenario's load thresholds)")
    ld.add_argument("--min-requests", type=int, help="measured requests a step needs to decide (default 100)")
    ld.add_argument("--max-loop-lag-p99-ms", type=float, help="generator event-loop lag that makes a step client-limited")
    v = p.add_argument_group("verdict (override the scenario's verdict section)")
    for name, f in VerdictConfig.model_fields.items():
        kind = int if f.annotation is int else float
        v.add_argument(f"--{name.replace('_', '-')}", type=kind, help=VERDICT_HELP.get(name))


OVERRIDE_KEYS = ("peak_qps", "peak_concurrency", "safety_factor", "redundancy", "current_nodes", "replicas_behind_url",
                 "gpus_per_node", "gpu_hour_usd", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms", "itl_p95_ms",
                 "first_visible_p95_ms", "tpot_visible_p95_ms", "attainment", "error_rate", "min_requests", "max_loop_lag_p99_ms", *VerdictConfig.model_fields)


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity analyze",
                      description="Analyse a results folder (or a repeat set): knee, capacity under SLO, plan, verdict.")
    p.add_argument("results_dir", type=Path, metavar="RESULTS_DIR",
                   help="a folder written by capacity run (requests.jsonl, steps.json, meta.json), or a --repeat set")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write summary.json and the report here instead of into RESULTS_DIR (a what-if analysis "
                        "with other SLO or capacity figures then leaves the run's own files as they were)")
    _add_overrides(p)
    p.add_argument("--format", choices=("text", "json", "md", "answer"), default="text",
                   help="what to print (files are always written): text starts with the plain answer and its "
                        "reasons; answer prints only those and the report's path")
    p.add_argument("--no-report", action="store_true", help="write summary.json only (no HTML / PNG / Markdown)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--progress", action="store_true", help="progress lines from the start (default: after 1 s)")
    p.add_argument("--fail-on-slo", action="store_true", help="exit 3 when the SLO does not hold (see module docs)")
    p.add_argument("--fail-on-verdict", choices=("scale", "observe", "dont_scale_yet"), help="exit 3 on this verdict")
    p.add_argument("--history", metavar="PATH|URL",
                   help="record the analysed folder in this catalog: a SQLite file, a postgresql:// URL or `off` "
                        "(default: $CAPACITY_HISTORY, else history.sqlite beside RESULTS_DIR; not with --out, "
                        "whose what-if leaves the run's own record as it was; docs/history.md)")
    return p


def main(argv: list[str] | None = None) -> int:
    # the pipeline (pandas, numpy) is imported before the clock starts: the progress lines count
    # the analysis, not the imports
    from capacity_plugins.analysis import pipeline  # noqa: F401
    from capacity_plugins.outputs import analyze

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

    if args.out is not None:
        check_out_dir(args.out)
    summary = analyze(args.results_dir, overrides=overrides, progress=progress,
                      formats=["json"] if args.no_report else None, out=args.out)
    try:
        _print_summary(args, summary)
    except BrokenPipeError:  # `capacity analyze … | head`: the reader left, the files are written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if args.out is None:
        _record(args)
    failed = gate(summary, args.fail_on_slo, args.fail_on_verdict)
    for f in failed:
        print(f"capacity analyze: {f}", file=sys.stderr)
    code = exit_code(summary, failed)
    if not summary.outcome.decision_complete:
        print("capacity analyze: the decision could not be completed: " + "; ".join(summary.outcome.reasons),
              file=sys.stderr)
    return code


def _record(args: argparse.Namespace) -> None:
    """The analysed folder into the run catalog (history/catalog.py); a failure is one line, never the
    analysis's exit code. Before the decision lines: a web session reads the last line as the reason."""
    from capacity_plugins.history.catalog import recording_where
    from capacity_plugins.history.record import record_analysed

    folder = args.results_dir
    where = recording_where(args.history, folder.resolve().parent)
    if where is None:
        return
    recorded, line = record_analysed(folder, where)
    if not (recorded and args.quiet):
        print(f"capacity analyze: history: {line}", file=sys.stderr, flush=True)


def check_out_dir(out: Path) -> None:
    """--out must be a folder this user can write (made if missing), and not a file: exit 2 before reading."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".capacity-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e})") from None


def _print_summary(args: argparse.Namespace, summary: AnySummary) -> None:
    from capacity_plugins.analysis.answer import answer_lines
    from capacity_plugins.contracts.summary import Summary

    if args.format in ("text", "answer"):
        # The plain answer first, everywhere (analysis/answer.py), then its reasons in words.
        print("\n".join(answer_lines(summary)))
    if args.format == "json":
        print(summary.dumps())
    elif args.format == "answer":
        pass
    elif not isinstance(summary, Summary):  # a repeat set
        from capacity_plugins.outputs.repeats_report import set_headline, set_markdown

        print(set_markdown(summary) if args.format == "md" else "\n" + "\n".join(set_headline(summary)))
    elif args.format == "md":
        from capacity_plugins.outputs.report_text import markdown

        print(markdown(summary))
    else:
        from capacity_plugins.outputs.report_text import headline

        lines = headline(summary)
        # the verdict line repeats the reasons the answer block just gave
        print("\n" + "\n".join(ln for ln in lines if not ln.startswith("Verdict: ")))
        for w in summary.warnings:
            if f"Warning: {w}" not in lines:  # the headline already led with it
                print(f"warning: {w}")
    if args.format in ("text", "answer"):
        dest = args.out if args.out is not None else args.results_dir
        print(f"report: {dest / 'report.html'}" if not args.no_report else f"summary: {dest / 'summary.json'}")
    sys.stdout.flush()
