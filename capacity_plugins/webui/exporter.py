"""The live Prometheus exporter of the swarm: what Grafana shows while a test runs.

Metric names carry the `capacity_` prefix and base units (seconds, bytes), so a dashboard can be
written against them once:

- `capacity_ttft_seconds`, `capacity_itl_seconds`, `capacity_tpot_seconds`, `capacity_e2e_seconds`
  histograms{name} — successful requests only, from the live LLMStats log histograms, re-bucketed
  onto fixed bounds (1 ms … 60 s). A log-bucket that straddles a bound is counted above it, so a
  cumulative count is exact up to the sketch's relative error (≤ 1 %) at the bound.
- `capacity_requests_total{name, status="ok"|"error", error_kind}`, `capacity_output_tokens_total{name}`,
  `capacity_prompt_tokens_total{name}` counters (reset with Locust's "reset stats"; Prometheus
  `rate()` handles resets).
- `capacity_window_rps{name}`, `capacity_window_output_tokens_per_second{name}`: completions over
  LLMStats' recent window.
- `capacity_users`, `capacity_step_index`, `capacity_step_level`, `capacity_offered_rps`,
  `capacity_target_rps`, `capacity_achieved_rps`, `capacity_workers`, `capacity_runner_state{state}`
  from `runner_info()` — whatever keys it provides (missing or None keys are left out).
- `capacity_telemetry_<series>{host, device}` gauges: the latest normalised telemetry
  (`TelemetryCollector.latest()`), e.g. `capacity_telemetry_gpu_util_pct`.

Everything is read at scrape time from callables, so nothing is kept twice. A callable that
raises loses only its own metrics for that scrape. LLMStats is not safe across OS threads, so
the server must run in the same gevent hub as the users: `serve()` uses gevent's WSGI server in
a patched process; `flask_view()` mounts `/metrics` on Locust's web UI. Locust's `--web-login`
protects only Locust's own routes, so `/metrics` stays open for Prometheus (bind the UI to a
private address if that matters).

Usage::

    registry = build_registry(llm_stats=lambda: stats, runner_info=info, telemetry_latest=collector.latest)
    server = serve(registry, "127.0.0.1", 9646)          # headless --exporter-port
    environment.web_ui.app.add_url_rule("/metrics", "capacity_metrics", flask_view(registry))
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

logger = logging.getLogger(__name__)

# Seconds. Covers ITL (ms) through long E2E (tens of s) with Prometheus-usual steps.
BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
                                0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)

HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    ("ttft_ms", "capacity_ttft_seconds", "Time to first token (first output chunk − send), successful requests."),
    ("itl_ms", "capacity_itl_seconds", "Inter-token latency: gaps between consecutive output chunks."),
    ("tpot_ms", "capacity_tpot_seconds", "Time per output token after the first, per request."),
    ("e2e_ms", "capacity_e2e_seconds", "End-to-end request latency (end − send), successful requests."),
)

RUNNER_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("users", "capacity_users", "Current simulated users (closed loop) across all workers."),
    ("step", "capacity_step_index", "Index of the current load step (steps.json)."),
    ("level", "capacity_step_level", "Level of the current step: users or target requests/s."),
    ("target_rps", "capacity_target_rps", "Target request rate of the current open-loop step."),
    ("offered_rps", "capacity_offered_rps", "Requests/s actually scheduled in the current step."),
    ("achieved_rps", "capacity_achieved_rps", "Requests/s completed over the live window (the last ~10 s, all workers)."),
    ("workers", "capacity_workers", "Connected load-generator worker processes."),
)

_SERIES_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def rebucket(buckets: Iterable[tuple[float, int]], bounds_ms: Iterable[float]) -> list[tuple[float, int]]:
    """Cumulative counts at each bound from (upper_bound, count) buckets sorted ascending.

    A source bucket counts at a bound only when its upper bound is ≤ the bound (Prometheus `le`).
    """
    out: list[tuple[float, int]] = []
    it = iter(buckets)
    pending = next(it, None)
    running = 0
    for bound in bounds_ms:
        while pending is not None and pending[0] <= bound * (1.0 + 1e-12):
            running += pending[1]
            pending = next(it, None)
        out.append((bound, running))
    return out


class SwarmCollector(Collector):
    def __init__(self, llm_stats: Callable[[], Any | None], runner_info: Callable[[], dict[str, Any]],
                 telemetry_latest: Callable[[], dict[str, Any]]) -> None:
        self._llm_stats = llm_stats
        self._runner_info = runner_info
        self._telemetry_latest = telemetry_latest

    def describe(self) -> list[Metric]:
        # Dynamic metrics: an empty describe() keeps registration from calling collect() early.
        return []

    def collect(self) -> Iterator[Metric]:
        for part in (self._stats_metrics, self._runner_metrics, self._telemetry_metrics):
            try:
                yield from list(part())
            except Exception:
                logger.warning("exporter: %s failed; its metrics are left out of this scrape",
                               part.__name__, exc_info=True)

    def _stats_metrics(self) -> Iterator[Metric]:
        stats = self._llm_stats()
        if stats is None:
            return
        names = stats.names()
        bounds_ms = [b * 1000.0 for b in BUCKETS_S]
        for key, metric, help_ in HISTOGRAMS:
            fam = HistogramMetricFamily(metric, help_, labels=["name"])
            for name in names:
                hist = stats.histograms(name)[key]
                cumulative = rebucket(hist.iter_buckets(), bounds_ms)
                le = [(_fmt_le(b / 1000.0), float(c)) for b, c in cumulative] + [("+Inf", float(hist.count))]
                fam.add_metric([name], le, sum_value=float(hist.sum) / 1000.0)
            yield fam
        requests = CounterMetricFamily("capacity_requests", "LLM calls finished, by outcome.",
                                       labels=["name", "status", "error_kind"])
        out_tokens = CounterMetricFamily("capacity_output_tokens", "Output tokens of successful calls.",
                                         labels=["name"])
        prompt_tokens = CounterMetricFamily("capacity_prompt_tokens", "Prompt tokens of successful calls.",
                                            labels=["name"])
        rps = GaugeMetricFamily("capacity_window_rps", "Completed calls/s over the recent window.", labels=["name"])
        tps = GaugeMetricFamily("capacity_window_output_tokens_per_second",
                                "Output tokens/s over the recent window.", labels=["name"])
        for row in stats.rows(time.time()):
            name = row["name"]
            if name == getattr(stats, "AGGREGATED", "Aggregated"):
                continue  # sum over `name` in PromQL instead; exporting it would double-count
            requests.add_metric([name, "ok", ""], float(row["requests"] - row["failures"]))
            for kind, n in row.get("errors_by_kind", {}).items():
                requests.add_metric([name, "error", kind], float(n))
            out_tokens.add_metric([name], float(row.get("output_tokens") or 0))
            prompt_tokens.add_metric([name], float(row.get("prompt_tokens") or 0))
            if row.get("rps") is not None:
                rps.add_metric([name], float(row["rps"]))
            if row.get("output_tokens_per_s") is not None:
                tps.add_metric([name], float(row["output_tokens_per_s"]))
        yield from (requests, out_tokens, prompt_tokens, rps, tps)

    def _runner_metrics(self) -> Iterator[Metric]:
        info = self._runner_info() or {}
        for key, metric, help_ in RUNNER_GAUGES:
            value = info.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                yield GaugeMetricFamily(metric, help_, value=float(value))
        if info.get("state"):
            fam = GaugeMetricFamily("capacity_runner_state", "1 for the runner's current state.", labels=["state"])
            fam.add_metric([str(info["state"])], 1.0)
            yield fam

    def _telemetry_metrics(self) -> Iterator[Metric]:
        latest = self._telemetry_latest() or {}
        families: dict[str, GaugeMetricFamily] = {}
        for host, devices in latest.items():
            for device, series in devices.items():
                for name, reading in series.items():
                    value = reading.get("value") if isinstance(reading, dict) else reading
                    if not _SERIES_NAME.match(name) or not isinstance(value, int | float):
                        continue
                    fam = families.get(name)
                    if fam is None:
                        unit = reading.get("unit", "") if isinstance(reading, dict) else ""
                        fam = families[name] = GaugeMetricFamily(
                            f"capacity_telemetry_{name}", f"Latest telemetry reading of {name} ({unit}).",
                            labels=["host", "device"])
                    fam.add_metric([str(host), str(device)], float(value))
        yield from families.values()


def _fmt_le(seconds: float) -> str:
    return floatToGoString(seconds)


def build_registry(*, llm_stats: Callable[[], Any | None], runner_info: Callable[[], dict[str, Any]],
                   telemetry_latest: Callable[[], dict[str, Any]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(SwarmCollector(llm_stats, runner_info, telemetry_latest))
    return registry


class ExporterServer:
    """Handle of a running exporter; `.port` is the bound port, `.stop()` ends it."""

    def __init__(self, stop: Callable[[], None], port: int) -> None:
        self._stop = stop
        self.port = port

    def stop(self) -> None:
        self._stop()


def serve(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9646) -> ExporterServer:
    """Serve /metrics for headless runs (`--exporter-port`). Raises OSError if the port is taken.

    In a gevent-patched process (Locust) the server is a greenlet in the users' hub, so a scrape
    never reads LLMStats from another OS thread; otherwise prometheus_client's threaded server.
    """
    from prometheus_client import make_wsgi_app

    app = make_wsgi_app(registry)
    try:
        from gevent import monkey

        patched = monkey.is_module_patched("socket")
    except ImportError:  # pragma: no cover - gevent is a dependency
        patched = False
    if patched:
        from gevent.pywsgi import WSGIServer

        server = WSGIServer((host, port), app, log=None)
        server.start()
        return ExporterServer(server.stop, server.server_port)
    from prometheus_client import start_http_server

    httpd, _ = start_http_server(port, addr=host, registry=registry)

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()

    return ExporterServer(stop, httpd.server_port)


def flask_view(registry: CollectorRegistry) -> Callable[[], Any]:
    """A Flask view serving the registry, for `environment.web_ui.app.add_url_rule("/metrics", ...)`."""

    def metrics() -> Any:
        from flask import Response

        return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    metrics.__name__ = "capacity_metrics"
    return metrics
