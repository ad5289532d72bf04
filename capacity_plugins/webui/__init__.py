"""Live view: the LLM tab in Locust's web UI, /llm/stats, downloads, and the live /metrics exporter.

`install(events)` (called by `plugin.install`) registers:

- `--exporter-port P` / `--exporter-host H` (default 127.0.0.1): serve the swarm's live Prometheus
  metrics on their own port, for headless runs (works with the UI too). Not shown in the UI form.
- an `init` listener, after the measurement plugin's, that on the local runner or the master
  (workers have no complete view) builds a `LiveView` and, when the web UI runs, mounts the tab,
  `/llm/stats`, the downloads and `/metrics` on it (`routes.mount`).

`/metrics` on the UI port is left open with `--web-login` so Prometheus can scrape it; everything
else the plugin adds follows the UI's login.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

_installed_on: set[int] = set()


def install(events: Any) -> None:
    """Register this package's listeners on `events` (called once by plugin.install)."""
    if id(events) in _installed_on:
        return
    _installed_on.add(id(events))
    events.init_command_line_parser.add_listener(_on_parser)
    events.init.add_listener(_on_init)


def _on_parser(parser: Any, **_: Any) -> None:
    # Locust's own add_argument (not an argument group's) understands include_in_web_ui.
    parser.add_argument("--exporter-port", type=int, default=0, metavar="PORT", include_in_web_ui=False,
                       help="serve live LLM metrics for Prometheus at http://HOST:PORT/metrics (master or "
                            "local runner; 0 = off). With the web UI they are also at its /metrics.")
    parser.add_argument("--exporter-host", default="127.0.0.1", metavar="HOST", include_in_web_ui=False,
                       help="address the --exporter-port server binds (default 127.0.0.1)")


def _on_init(environment: Any, **_: Any) -> None:
    ctx = getattr(environment, "capacity", None)
    if ctx is None or environment.runner is None or ctx.role == "worker":
        return
    try:
        attach(environment)
    except OSError as e:
        opts = environment.parsed_options
        sys.stderr.write(f"capacity: --exporter-port {opts.exporter_port} on {opts.exporter_host}: {e.strerror or e}\n")
        sys.stderr.flush()
        sys.exit(2)


def attach(environment: Any) -> Any:
    """Build the live view for this (local or master) environment and expose it. Returns the LiveView.

    Raises OSError when --exporter-port cannot be bound.
    """
    from capacity_plugins.sinks.exporter import build_registry, serve
    from capacity_plugins.webui.live import LiveView
    from capacity_plugins.webui.routes import base_path, mount

    ctx = environment.capacity
    live = LiveView(environment, ctx)
    environment.capacity_live = live
    registry = build_registry(
        llm_stats=lambda: ctx.llm_stats,
        runner_info=live.runner_info,
        telemetry_latest=live.telemetry_latest,
    )
    live.registry = registry
    opts = getattr(environment, "parsed_options", None)
    port = int(getattr(opts, "exporter_port", 0) or 0)
    if port:
        host = getattr(opts, "exporter_host", None) or "127.0.0.1"
        server = serve(registry, host, port)
        live.exporter = server
        print(f"[capacity] live metrics for Prometheus at http://{host}:{server.port}/metrics", flush=True)
        environment.events.quitting.add_listener(lambda **_: server.stop())
    live.attach()
    if environment.web_ui is not None:
        mount(environment.web_ui, live, registry, base_path(environment))
    return live
