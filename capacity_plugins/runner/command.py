"""The Locust child's command line: the scenario file plus only what this run decided itself.

Every request setting stays in the scenario, which the child reads once (client/options.py); this
adds the target URL (the embedded simulator's, or the scenario's), the results folder, the model
the preflight found when the scenario named none, the process layout and where things listen.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from capacity_plugins.scenario import Scenario

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locustfile.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def locust_command(s: Scenario, args: argparse.Namespace, url: str | None, model: str | None, folder: Path | None) -> list[str]:
    """The Locust child's command line: the scenario file plus only what this run decided itself
    (target URL, results folder, the model the preflight found); the child reads every other
    setting from the scenario (client/options.py)."""
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(Path(args.scenario).resolve())]
    if args.worker:
        return cmd + ["--worker", "--master-host", args.master_host, "--master-port", str(args.master_port)]
    assert folder is not None and url is not None
    cmd += ["--host", url, "--results-dir", str(folder)]
    if model and model != (s.target.model or ""):
        cmd += ["--model", model]
    # Failed requests are data, not a failed run (docs/exit-codes.md).
    cmd += ["--exit-code-on-error", "0", "--loglevel", "WARNING"]
    cmd += ["--csv", str(folder / "locust"), "--html", str(folder / "locust_report.html")]
    if args.web:
        cmd += ["--web-host", args.bind, "--web-port", str(args.web_port)]
    else:
        cmd += ["--headless", "--only-summary"]
    if args.processes is not None:
        port = _free_port()
        # Local worker processes: the master listens on loopback only, whatever --bind says.
        cmd += ["--processes", str(args.processes), "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--master-host", "127.0.0.1", "--master-port", str(port)]
    elif args.master:
        cmd += ["--master", "--expect-workers", str(args.expect_workers), "--master-bind-host", args.bind,
                "--master-bind-port", str(args.master_bind_port)]
    if args.exporter_port is not None:
        cmd += ["--exporter-port", str(args.exporter_port), "--exporter-host", args.bind]
    return cmd
