"""A rehearsal's telemetry: which collector runs, where it writes, and what meta.json learns from it.

The authority (local runner or master) starts one `RunTelemetry` per results folder: the scrape
targets of the scenario's `telemetry` section, the embedded simulator's /metrics when the target
is the simulator, and local GPUs through NVML. Generator processes' own CPU and memory go into the
same `telemetry_series.csv` (`client_rows`), next to the server's readings, so a client bottleneck
shows beside the GPU it was supposed to load.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario
    from capacity_plugins.telemetry.collector import TelemetryCollector

log = logging.getLogger(__name__)

# How many scrape gaps meta.json keeps (the rest are counted in telemetry.csv's holes anyway).
META_GAPS = 50


@dataclass(frozen=True)
class _Target:
    url: str
    kind: str | None = None


@dataclass(frozen=True)
class _Config:
    scrape: list[Any]
    nvml: bool
    interval_s: float


ATTRIBUTE = "capacity_telemetry"  # where the authority attaches it on the Locust environment


class RunTelemetry:
    def __init__(self, scenario: Scenario, host: str | None, step_of: Callable[[float], int | None]) -> None:
        self.scenario = scenario
        self.host = host
        self.step_of = step_of
        self.collector: TelemetryCollector | None = None

    def attach(self, environment: Any) -> None:
        """Make it the process's telemetry (the live view and /metrics read `latest`)."""
        setattr(environment, ATTRIBUTE, self)

    def latest(self) -> dict[str, Any]:
        """The newest reading of every series (host → device → series), {} while none runs."""
        collector = self.collector
        return (collector.latest() or {}) if collector is not None else {}

    def start(self, folder: Path) -> TelemetryCollector | None:
        """Start collecting into `folder`; None when nothing is configured. UserError for a bad target."""
        from capacity_plugins.telemetry.collector import collector_from_config

        tcfg = self.scenario.telemetry
        targets: list[Any] = list(tcfg.scrape)
        if self.scenario.target.embedded and self.host:
            targets.append(_Target(self.host.rstrip("/") + "/metrics", "simulator"))
        if not targets and not tcfg.nvml:
            return None
        cfg = _Config(scrape=targets, nvml=tcfg.nvml, interval_s=tcfg.interval_s)
        collector = collector_from_config(cfg, out_dir=folder, step_of=self.step_of)
        try:
            collector.start()
        except Exception:
            log.exception("telemetry collector did not start; the run goes on without it")
            return None
        self.collector = collector
        return collector

    def stop(self) -> dict[str, Any] | None:
        """Stop; what meta.json says about the telemetry (provenance, scrape gaps)."""
        collector, self.collector = self.collector, None
        if collector is None:
            return None
        try:
            collector.stop()
            # Provenance (server version/settings, models, GPU names) and gaps go into meta.json.
            return {"provenance": collector.provenance(), "gaps": list(collector.gaps)[-META_GAPS:]}
        except Exception:
            log.exception("stopping telemetry failed")
            return None

    def client_rows(self, device: str, host: str, cpu: Sequence[tuple[float, float, float | None]],
                    loop_lag: Sequence[tuple[float, float]] = ()) -> None:
        """A generator process's CPU %, RSS and loop lag as telemetry_series.csv rows."""
        if self.collector is None or not (cpu or loop_lag):
            return
        rows = []
        for u, pct, rss in cpu:
            base = {"unix": u, "step": self.step_of(u), "host": host, "device": device}
            rows.append({**base, "series": "client_cpu_pct", "value": pct, "unit": "%"})
            if rss is not None:
                rows.append({**base, "series": "client_rss_bytes", "value": rss, "unit": "bytes"})
        # Loop lag at 20 Hz would dwarf the file: one row per second (its worst tick) is what a reader needs.
        worst: dict[int, tuple[float, float]] = {}
        for u, lag in loop_lag:
            second = int(u)
            if second not in worst or lag > worst[second][1]:
                worst[second] = (u, lag)
        for u, lag in worst.values():
            rows.append({"unix": u, "step": self.step_of(u), "host": host, "device": device,
                         "series": "client_loop_lag_ms", "value": lag, "unit": "ms"})
        with contextlib.suppress(Exception):
            self.collector.add_series_rows(rows)
