"""`capacity gpu-agent`: a small Prometheus exporter of NVML readings for GPU hosts without DCGM.

It uses dcgm-exporter's metric names and labels (`gpu`, `UUID`, `device`, `modelName`,
`Hostname`) where a DCGM field exists, so the same scrapers and dashboards work, with DCGM's
units (framebuffer in MiB, power in W); readings DCGM has no field for are `capacity_gpu_*` in
base units. NVML is sampled every --interval in a native thread; a scrape serves the latest
reading, so scrapes are cheap and consistent. Without a driver or GPU it still serves /metrics
(with `capacity_gpu_nvml_available 0`) after one info line.

`--check` samples for --seconds and prints a JSON verdict instead of serving (exit 0 when NVML
answered with at least one GPU, 1 otherwise); scripts/gpu_check.py does the same with the real
bindings for a device check.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from capacity_plugins.errors import RunError, UserError
from capacity_plugins.telemetry.nvml import CLOCK_EVENT_REASONS, FIELDS, NvmlSampler

logger = logging.getLogger(__name__)

MIB = 2**20

# (metric, help, reading field, scale) — DCGM names and units.
DCGM_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_gpu_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "util_mem_pct", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "vram_used_bytes", 1 / MIB),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c", 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock event (throttle) reasons, NVML bitmask.",
     "clock_event_reasons", 1.0),
)
# Readings without a DCGM field, in base units.
CAPACITY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("capacity_gpu_vram_used_bytes", "GPU memory used (bytes).", "vram_used_bytes"),
    ("capacity_gpu_vram_total_bytes", "GPU memory total (bytes).", "vram_total_bytes"),
    ("capacity_gpu_power_limit_watts", "Enforced power limit (W).", "power_limit_w"),
)
LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")


class NvmlMetrics(Collector):
    """prometheus_client collector over the latest NVML readings."""

    def __init__(self, sampler: NvmlSampler, latest: Callable[[], list[dict[str, Any]]]) -> None:
        self._sampler = sampler
        self._latest = latest

    def collect(self) -> Iterator[GaugeMetricFamily]:
        readings = self._latest()
        host = self._sampler.host
        up = GaugeMetricFamily("capacity_gpu_nvml_available", "1 when NVML answered with at least one GPU.",
                               labels=["Hostname", "reason"])
        up.add_metric([host, self._sampler.reason or ""], 1.0 if self._sampler.available else 0.0)
        yield up

        def labels(r: dict[str, Any]) -> list[str]:
            return [str(r["index"]), r["uuid"] or "", f"nvidia{r['index']}", r["name"] or "", host]

        for metric, help_, field, scale in DCGM_FIELDS:
            fam = GaugeMetricFamily(metric, help_, labels=LABELS)
            for r in readings:
                if r.get(field) is not None:
                    fam.add_metric(labels(r), r[field] * scale)
            yield fam
        free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=LABELS)
        for r in readings:
            if r.get("vram_total_bytes") is not None and r.get("vram_used_bytes") is not None:
                free.add_metric(labels(r), (r["vram_total_bytes"] - r["vram_used_bytes"]) / MIB)
        yield free
        for metric, help_, field in CAPACITY_FIELDS:
            fam = GaugeMetricFamily(metric, help_, labels=LABELS)
            for r in readings:
                if r.get(field) is not None:
                    fam.add_metric(labels(r), float(r[field]))
            yield fam
        reasons = GaugeMetricFamily("capacity_gpu_clock_event_reason",
                                    "1 when this clock event (throttle) reason is active.",
                                    labels=[*LABELS, "reason"])
        for r in readings:
            if r.get("clock_event_reasons") is not None:
                for bit, name in CLOCK_EVENT_REASONS.items():
                    reasons.add_metric([*labels(r), name], 1.0 if r["clock_event_reasons"] & bit else 0.0)
        yield reasons


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="capacity gpu-agent",
                                description="Serve NVML GPU readings at /metrics under DCGM exporter names.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9400, help="port (default 9400, like dcgm-exporter)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between NVML samples (default 1)")
    p.add_argument("--check", action="store_true", help="sample for --seconds, print a JSON verdict, exit")
    p.add_argument("--seconds", type=float, default=10.0, help="--check duration (default 10)")
    p.add_argument("--nvml-module", help=argparse.SUPPRESS)  # tests: a fake pynvml module
    return p


def _load_module(name: str | None) -> Any:
    if not name:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise UserError(f"--nvml-module {name}: {e}") from e


def check(sampler: NvmlSampler, seconds: float, interval_s: float) -> dict[str, Any]:
    """Sample for `seconds` and summarise per GPU: which fields answered, their min/mean/max."""
    result: dict[str, Any] = {"host": sampler.host, "nvml_available": sampler.available,
                              "reason": sampler.reason, "driver_version": sampler.driver_version,
                              "seconds": seconds, "interval_s": interval_s, "gpus": []}
    if not sampler.available:
        result["ok"] = False
        result["verdict"] = f"no GPU sampling on this host: {sampler.reason}"
        return result
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    while True:
        try:
            for r in sampler.read():
                per_gpu.setdefault(r["index"], []).append(r)
        except Exception as e:  # a real driver can fail mid-check (GPU lost); report it, do not crash
            errors.append(f"{type(e).__name__}: {e}")
        if time.monotonic() + interval_s > deadline:
            break
        time.sleep(interval_s)
    for info in sampler.gpus():
        rows = per_gpu.get(info["index"], [])
        gpu: dict[str, Any] = {**info, "samples": len(rows), "fields": {}, "unsupported": []}
        for field in FIELDS:
            values = [r[field] for r in rows if r.get(field) is not None]
            if not values:
                gpu["unsupported"].append(field)
            elif field == "clock_event_reasons":
                seen = sorted({n for r in rows for n in r["clock_event_reason_names"]})
                gpu["fields"][field] = {"seen": seen}
            else:
                gpu["fields"][field] = {"min": min(values), "mean": statistics.fmean(values), "max": max(values)}
        result["gpus"].append(gpu)
    result["errors"] = errors
    essential = ("util_gpu_pct", "vram_used_bytes", "vram_total_bytes")
    ok = bool(result["gpus"]) and all(g["samples"] > 0 and not set(essential) & set(g["unsupported"])
                                      for g in result["gpus"])
    result["ok"] = ok
    result["verdict"] = (f"NVML sampling works on {len(result['gpus'])} GPU(s)" if ok
                         else "NVML answered but essential readings are missing (see unsupported / errors)")
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: must be 1-65535")
    if args.interval <= 0 or args.seconds <= 0:
        raise UserError("--interval and --seconds must be > 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sampler = NvmlSampler(interval_s=args.interval, nvml_module=_load_module(args.nvml_module))
    if args.check:
        report = check(sampler, args.seconds, args.interval)
        sampler.close()
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["ok"] else 1
    return serve(sampler, args.host, args.port)


def serve(sampler: NvmlSampler, host: str, port: int) -> int:
    latest: list[list[dict[str, Any]]] = [sampler.read()]
    registry = CollectorRegistry()
    registry.register(NvmlMetrics(sampler, lambda: latest[0]))
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise RunError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e

    def keep(readings: list[dict[str, Any]], unix: float) -> None:
        latest[0] = readings

    sampler.start(keep)
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    shown = host if host not in ("", "0.0.0.0") else socket.gethostname()
    print(f"capacity gpu-agent: serving {len(sampler.gpus())} GPU(s) at http://{shown}:{port}/metrics",
          flush=True)
    while not stop["now"]:
        time.sleep(0.2)
    sampler.close()
    server.shutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
