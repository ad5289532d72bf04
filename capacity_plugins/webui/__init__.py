"""Live view: the LLM tab in Locust's web UI, /llm/stats, downloads, and the live /metrics exporter.

The plugin (plugin.py) calls, in its order:

- `add_arguments(parser)`: `--exporter-port P` / `--exporter-host H` (default 127.0.0.1) serve the
  swarm's live Prometheus metrics on their own port, for headless runs (works with the UI too).
  Not shown in the UI form.
- `register(environment, client, results, role, membership)` on the local runner or the master
  (workers have no complete view): builds a `LiveView` of the client's stats and records, the
  results folder and the master's membership, attaches it as `environment.capacity_live`, and, when the web UI runs, mounts the tab, `/llm/stats`, the downloads and
  `/metrics` on it (`routes.mount`).

`/metrics` on the UI port is left open with `--web-login` so Prometheus can scrape it; everything
else the plugin adds follows the UI's login.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.swarm.membership import SwarmMembership
    from capacity_plugins.webui.live import LiveView

log = logging.getLogger(__name__)


def add_arguments(parser: Any) -> None:
    # Locust's own add_argument (not an argument group's) understands include_in_web_ui.
    parser.add_argument("--exporter-port", type=int, default=0, metavar="PORT", include_in_web_ui=False,
                       help="serve live LLM metrics for Prometheus at http://HOST:PORT/metrics (master or "
                            "local runner; 0 = off). With the web UI they are also at its /metrics.")
    parser.add_argument("--exporter-host", default="127.0.0.1", metavar="HOST", include_in_web_ui=False,
                       help="address the --exporter-port server binds (default 127.0.0.1)")


def register(environment: Environment, client: LLMClient, results: Any, role: str,
             membership: SwarmMembership | None = None, scenario: Any = None) -> LiveView:
    """Build the live view for this (local or master) process and expose it. Returns the LiveView.
    `results` is the process's results folder (rehearsal/results.py `ResultsFolder`: its `path`).

    Raises OSError when --exporter-port cannot be bound.
    """
    from capacity_plugins.webui.exporter import build_registry, serve
    from capacity_plugins.webui.live import LiveView
    from capacity_plugins.webui.routes import base_path, mount

    live = LiveView(environment, stats=client.stats, records=client.records, results=results, role=role,
                    membership=membership, scenario=scenario)
    environment.capacity_live = live  # type: ignore[attr-defined]
    registry = build_registry(
        llm_stats=lambda: client.stats,
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
