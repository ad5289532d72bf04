"""Scrapes Prometheus endpoints (and local NVML) every interval and writes the telemetry files.

Each target (and local NVML) has its own native OS thread, so the collector works unchanged
inside a gevent-patched Locust process, never blocks its hub, and one endpoint that hangs until
its timeout (shorter than the interval) cannot delay the others. An endpoint that is down, slow
or returns garbage is a *gap* (url, unix, reason), logged once when it starts and once when it
recovers; the run goes on. A scrape that overruns skips the missed slots rather than bursting.
Rows are appended and flushed after every scrape, under one lock.

`latest()` shape (for the web UI and the live exporter)::

    {host: {device: {series: {"value": float, "unit": str, "unix": float}}}}

Rows from elsewhere (client CPU samples that workers send to the master) join the series file
through `add_series_rows()`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capacity_plugins.errors import UserError
from capacity_plugins.host import NativeLoop, real_lock
from capacity_plugins.telemetry.files import (
    RAW_COLUMNS,
    RAW_FILE,
    SERIES_COLUMNS,
    SERIES_FILE,
    AppendCsv,
    labels_json,
)
from capacity_plugins.telemetry.maps import (
    UNITS,
    SeriesTracker,
    guess_kind,
    keep_raw,
    normalize,
    provenance,
)
from capacity_plugins.telemetry.nvml import NvmlSampler, acquire_host_lock, release_host_lock
from capacity_plugins.telemetry.scrape import ScrapeTarget

logger = logging.getLogger(__name__)

MAX_GAPS = 10_000

# NVML reading field -> (normalised series); raw rows keep the reading's own field names.
NVML_SERIES = {
    "util_gpu_pct": "gpu_util_pct",
    "util_mem_pct": "gpu_mem_util_pct",
    "vram_used_bytes": "vram_used_bytes",
    "vram_total_bytes": "vram_total_bytes",
    "temp_c": "gpu_temp_c",
    "power_w": "gpu_power_w",
    "power_limit_w": "gpu_power_limit_w",
    "sm_clock_mhz": "sm_clock_mhz",
    "clock_event_reasons": "clock_event_reasons",
}


class _TargetState:
    def __init__(self, target: ScrapeTarget) -> None:
        self.target = target
        self.kind = target.kind
        self.tracker = SeriesTracker()
        self.down_since: float | None = None
        self.provenance: dict[str, Any] | None = None
        self.unknown_reported = False


class TelemetryCollector:
    def __init__(self, targets: list[ScrapeTarget], *, interval_s: float = 1.0, out_dir: Path,
                 step_of: Callable[[float], int | None] = lambda t: None, nvml: bool = False,
                 timeout_s: float | None = None) -> None:
        self.interval_s = float(interval_s)
        # Shorter than the interval so one dead endpoint cannot stall the others for long.
        self.timeout_s = timeout_s if timeout_s is not None else max(0.2, min(0.8 * self.interval_s, 5.0))
        self.out_dir = Path(out_dir)
        self._step_of = step_of
        self._targets = [_TargetState(t) for t in targets]
        self._want_nvml = nvml
        self._nvml: NvmlSampler | None = None
        self._nvml_lock: str | None = None
        self._lock = real_lock()      # latest / gaps / pending: held for microseconds, also by the hub
        self._io_lock = real_lock()   # the files: held by scrape threads while writing and flushing
        self._latest: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self._gaps: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._raw: AppendCsv | None = None
        self._series: AppendCsv | None = None
        self._loops = [NativeLoop(f"scrape {st.target.url}", self.interval_s, functools.partial(self._tick_target, st),
                                  final=functools.partial(self._tick_target, st)) for st in self._targets]
        if nvml:
            self._loops.append(NativeLoop("nvml", self.interval_s, self._tick_nvml, final=self._tick_nvml))
        self.scrapes = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._open_files()
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        """Final scrape of every target, flush and close; safe to call twice."""
        for loop in self._loops:
            loop.request_stop()
        for loop in self._loops:
            loop.wait(timeout_s=max(10.0, 3 * self.timeout_s))
        self._flush_pending()
        self._close()

    def _open_files(self) -> None:
        if self._raw is None:
            self._raw = AppendCsv(self.out_dir / RAW_FILE, RAW_COLUMNS)
            self._series = AppendCsv(self.out_dir / SERIES_FILE, SERIES_COLUMNS)

    def _close(self) -> None:
        with self._io_lock:
            for f in (self._raw, self._series):
                if f is not None:
                    f.close()
        if self._nvml is not None:
            self._nvml.close()
        if self._nvml_lock is not None:
            release_host_lock(self._nvml_lock)
            self._nvml_lock = None

    # -- one interval ------------------------------------------------------------------------

    def tick(self) -> None:
        """Scrape every target (and NVML) once, now, in this thread; for tests and forced reads."""
        for state in self._targets:
            self._tick_target(state)
        if self._want_nvml:
            self._tick_nvml()

    def _tick_target(self, state: _TargetState) -> None:
        raw_rows: list[dict[str, Any]] = []
        series_rows: list[dict[str, Any]] = []
        self._scrape_one(state, raw_rows, series_rows)
        self._write(raw_rows, series_rows, scrape=True)

    def _tick_nvml(self) -> None:
        if self._nvml is None:
            # nvmlInit blocks; the first call runs in the NVML loop's own thread, not the caller's hub.
            self._nvml = NvmlSampler(interval_s=self.interval_s)
            if self._nvml.available and not acquire_host_lock(self._nvml.lock_name):
                # With several load-generator processes on a GPU host, one of them samples.
                logger.info("telemetry: another process on %s already samples its GPUs", self._nvml.host)
                self._nvml.close()
                self._nvml.reason = "another process on this host samples NVML"
            elif self._nvml.available:
                self._nvml_lock = self._nvml.lock_name
        if self._nvml.available:
            raw_rows: list[dict[str, Any]] = []
            series_rows: list[dict[str, Any]] = []
            self._read_nvml(raw_rows, series_rows)
            self._write(raw_rows, series_rows, scrape=True)

    def _flush_pending(self) -> None:
        self._write([], [])

    def _write(self, raw_rows: list[dict[str, Any]], series_rows: list[dict[str, Any]], *,
               scrape: bool = False) -> None:
        self._open_files()
        with self._lock:
            series_rows.extend(self._pending)
            self._pending.clear()
        for row in raw_rows + series_rows:
            row["step"] = self._safe_step(row["unix"])
        with self._io_lock:
            if self._raw is not None and self._series is not None:
                self._raw.write(raw_rows)
                self._series.write(series_rows)
        with self._lock:
            for row in series_rows:
                self._latest.setdefault(row["host"], {}).setdefault(row["device"], {})[row["series"]] = {
                    "value": row["value"], "unit": row["unit"], "unix": row["unix"]}
            if scrape:
                self.scrapes += 1

    def _safe_step(self, unix: float) -> int | None:
        try:
            return self._step_of(unix)
        except Exception:  # the step clock is someone else's code; a bad answer is just "no step"
            logger.debug("step_of(%s) failed", unix, exc_info=True)
            return None

    def _scrape_one(self, state: _TargetState, raw_rows: list, series_rows: list) -> None:
        target = state.target
        result = target.scrape(self.timeout_s)
        if result.error is not None:
            self._gap(state, result.unix, result.error)
            return
        if state.down_since is not None:
            logger.info("telemetry: %s answers again after %.1f s", target.url, result.unix - state.down_since)
            state.down_since = None
        if state.kind is None:
            state.kind = guess_kind(s.name for s in result.samples)
            if state.kind is not None:
                logger.info("telemetry: %s looks like %s", target.url, state.kind)
        if state.provenance is None:
            state.provenance = provenance(state.kind, result.samples)
        for s in result.samples:
            if keep_raw(state.kind, s.name):
                raw_rows.append({"unix": result.unix, "source": target.url, "metric": s.name,
                                 "labels": labels_json(s.labels), "value": s.value})
        if state.kind is None:
            if not state.unknown_reported:
                state.unknown_reported = True
                self._gap(state, result.unix, "metric names not recognised: raw samples kept, no normalised "
                                              "series (set the target's kind)", transient=False)
            return
        snap = normalize(state.kind, result.samples, target.default_host)
        series_rows.extend(state.tracker.rows(snap, result.unix))

    def _gap(self, state: _TargetState, unix: float, reason: str, *, transient: bool = True) -> None:
        if transient and state.down_since is None:
            state.down_since = unix
            logger.warning("telemetry: %s: %s (recorded as a gap; the run goes on)", state.target.url, reason)
        with self._lock:
            if len(self._gaps) < MAX_GAPS:
                self._gaps.append({"url": state.target.url, "unix": unix, "reason": reason})

    def _read_nvml(self, raw_rows: list, series_rows: list) -> None:
        assert self._nvml is not None
        unix = time.time()
        source = f"nvml://{self._nvml.host}"
        for reading in self._nvml.read():
            labels = labels_json({"gpu": str(reading["index"]), "uuid": reading["uuid"] or "",
                                  "name": reading["name"] or ""})
            for field, series in NVML_SERIES.items():
                value = reading.get(field)
                if value is None:
                    continue
                raw_rows.append({"unix": unix, "source": source, "metric": field, "labels": labels,
                                 "value": value})
                series_rows.append({"unix": unix, "host": self._nvml.host, "device": str(reading["index"]),
                                    "series": series, "value": value, "unit": UNITS.get(series, "")})

    # -- readers -----------------------------------------------------------------------------

    def add_series_rows(self, rows: list[dict[str, Any]]) -> None:
        """Queue normalised rows from elsewhere (e.g. workers' client_cpu_pct); written next tick."""
        with self._lock:
            self._pending.extend(dict(r) for r in rows)

    def latest(self) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        with self._lock:
            return {h: {d: {s: dict(v) for s, v in ser.items()} for d, ser in devs.items()}
                    for h, devs in self._latest.items()}

    @property
    def gaps(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(g) for g in self._gaps]

    def provenance(self) -> dict[str, Any]:
        out: dict[str, Any] = {"targets": {}}
        for state in self._targets:
            entry = dict(state.provenance or {})
            entry.setdefault("kind", state.kind)
            out["targets"][state.target.url] = entry
        gpu_models = sorted({m for e in out["targets"].values() for m in e.get("gpu_models", [])})
        if self._nvml is not None and self._nvml.reason is None:  # still described after close()
            gpus = self._nvml.gpus()
            out["nvml"] = {"host": self._nvml.host, "driver_version": self._nvml.driver_version, "gpus": gpus}
            gpu_models = sorted(set(gpu_models) | {g["name"] for g in gpus if g["name"]})
        elif self._nvml is not None:
            out["nvml"] = {"host": self._nvml.host, "unavailable": self._nvml.reason}
        out["gpu_models"] = gpu_models
        out["served_models"] = sorted({m for e in out["targets"].values() for m in e.get("served_models", [])})
        return out


def collector_from_config(cfg: Any, *, out_dir: Path,
                          step_of: Callable[[float], int | None] = lambda t: None) -> TelemetryCollector:
    """A collector from the scenario's `telemetry` section (`scrape` [{url, kind}], `nvml`, `interval_s`).

    Duck-typed so this module does not depend on the scenario model; a bad target is a UserError
    naming its field path.
    """
    targets = []
    for i, item in enumerate(getattr(cfg, "scrape", None) or []):
        url, kind = (item, None) if isinstance(item, str) else (getattr(item, "url", None), getattr(item, "kind", None))
        try:
            targets.append(ScrapeTarget(str(url), kind))
        except ValueError as e:
            raise UserError(f"telemetry.scrape[{i}]: {e}") from e
    return TelemetryCollector(targets, interval_s=float(getattr(cfg, "interval_s", 1.0)), out_dir=out_dir,
                              step_of=step_of, nvml=bool(getattr(cfg, "nvml", False)))
