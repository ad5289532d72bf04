"""`capacity simulate`: start the embedded inference simulator in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path

from capacity_plugins.errors import CommandParser, UserError
from capacity_plugins.simulator.config import SimConfig


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="capacity simulate", description="Embedded continuous-batching LLM server simulator "
                     "(OpenAI/vLLM, TGI and Ollama APIs, vLLM-named /metrics, simulated DCGM GPU metrics).")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind; 0 picks a free one (default 8000)")
    parser.add_argument("--truth-log", type=Path, default=None, metavar="PATH",
                        help="append one JSON line per request with the server-side timings")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    SimConfig.add_arguments(parser)
    return parser


def main(argv: list[str]) -> int:
    try:
        ns = build_parser().parse_args(argv)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if not 0 <= ns.port <= 65535:
        raise UserError(f"--port: must be between 0 and 65535, got {ns.port}")
    config = SimConfig.from_namespace(ns)
    if ns.truth_log is not None and not ns.truth_log.parent.is_dir():
        raise UserError(f"--truth-log: folder {ns.truth_log.parent} does not exist")
    from capacity_plugins.simulator.server import run

    run(config, ns.host, ns.port, ns.truth_log, ns.exit_on_stdin_eof)
    return 0
