"""The `capacity` command.

Each subcommand lives in the module that owns its concern and exposes `main(argv) -> int`
(`capacity analyze` and `capacity compare` here, in cli/analyze.py and cli/compare.py: they
compute with analysis/ and print with outputs/); this file only dispatches, so adding a command never touches another one's code. Imports are
lazy: `capacity analyze` must not pay for (or be broken by) gevent/Locust imports.
"""

from __future__ import annotations

import importlib
import sys

from capacity_plugins.analysis.extra import ANALYSIS_INSTALL, ANALYSIS_LIBS, missing_analysis_libs
from capacity_plugins.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED, RunError, UserError

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("capacity_plugins.runner", "run a scenario (sweep, rate steps, peak) and analyse it"),
    "analyze": ("capacity_plugins.cli.analyze", "analyse a results folder: knee, capacity, plan, verdict"),
    "compare": ("capacity_plugins.cli.compare", "compare two analysed runs (before / after)"),
    "history": ("capacity_plugins.cli.history", "the catalog of analysed runs: add, list, show, trend, bless"),
    "gate": ("capacity_plugins.cli.gate", "exit 3 when a run is worse than a baseline beyond the noise and a margin"),
    "matrix": ("capacity_plugins.matrix", "run one scenario against several server configurations, one table"),
    "simulate": ("capacity_plugins.simulator.cli", "start the embedded inference simulator"),
    "corpus": ("capacity_plugins.corpus.cli", "corpus tools: stats, build"),
    "trace": ("capacity_plugins.corpus.trace_cli", "make a replayable trace: from-records, from-log"),
    "gpu-agent": ("capacity_plugins.telemetry.agent", "Prometheus exporter of NVML GPU readings"),
}

# Commands that always analyse. `compare` analyses only a folder without summary.json, and
# `corpus stats` needs pandas/pyarrow only for .parquet: those are caught when they import one.
NEEDS_ANALYSIS = ("analyze",)


def _usage() -> str:
    lines = ["usage: capacity COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`capacity COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else EXIT_BAD_INPUT
    if argv[0] in ("-V", "--version"):
        from capacity_plugins import __version__

        print(f"capacity-plugins {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"capacity: unknown command {name!r} (known: {', '.join(COMMANDS)})", file=sys.stderr)
        return EXIT_BAD_INPUT
    if name in NEEDS_ANALYSIS and missing_analysis_libs() and not {"-h", "--help"} & set(rest):
        print(f"capacity {name}: the analysis needs: {ANALYSIS_INSTALL}", file=sys.stderr)
        return EXIT_BAD_INPUT
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in ANALYSIS_LIBS:
            raise
        print(f"capacity {name}: needs {e.name}, part of the analysis: {ANALYSIS_INSTALL}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UserError as e:
        print(f"capacity {name}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunError as e:
        print(f"capacity {name}: run failed: {e}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
