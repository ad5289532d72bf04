"""Run the simulator: one asyncio loop holding the HTTP server and the engine task.

`serve` prints one ready line, `READY_PREFIX + url`, on stdout once the socket listens (after
binding port 0 it carries the real port) — the launcher waits for it, so there is no race for
a free port.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import traceback
from pathlib import Path

from capacity_plugins.errors import RunError
from capacity_plugins.simulator.app import SimulatorApp
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.http import HttpProtocol
from capacity_plugins.simulator.truth import TruthLog

READY_PREFIX = "capacity-simulator ready on "


async def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 0, truth_log: Path | None = None,
                exit_on_stdin_eof: bool = False) -> None:
    truth = TruthLog(truth_log) if truth_log else None
    app = SimulatorApp(config, truth)
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(lambda: HttpProtocol(app.handle), host, port, backlog=1024)
    except OSError as e:
        raise RunError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    bound = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if exit_on_stdin_eof:
        # The launcher holds our stdin open; EOF means it died, so we must not linger as an orphan.
        def stdin_readable() -> None:
            try:
                data = os.read(0, 4096)
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(0)
                stop.set()

        loop.add_reader(0, stdin_readable)
    engine = asyncio.create_task(app.engine.run())

    def engine_died(task: asyncio.Task[None]) -> None:
        # A crashed scheduler would leave clients hanging forever; die loudly instead.
        if not task.cancelled() and task.exception() is not None:
            traceback.print_exception(task.exception(), file=sys.stderr)
            stop.set()

    engine.add_done_callback(engine_died)
    print(f"{READY_PREFIX}http://{host}:{bound}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        engine.cancel()
        if truth is not None:
            truth.close()


def run(config: SimConfig, host: str = "127.0.0.1", port: int = 0, truth_log: Path | None = None,
        exit_on_stdin_eof: bool = False) -> None:
    asyncio.run(serve(config, host, port, truth_log, exit_on_stdin_eof))
