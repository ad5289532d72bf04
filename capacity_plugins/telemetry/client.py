"""The load generator's own CPU and memory, so a client bottleneck can be told apart from a server one.

`cpu_pct` is this process's CPU time over the last interval as a percentage of one core (100 =
one core fully busy, which is the ceiling of a single gevent loop; more is possible only with
native threads). `system_cpu_pct` is the whole machine, 0-100 across all cores, noted because a
neighbour process can starve the generator too. Sampling runs in a native thread so a busy hub
cannot delay its own measurement.

Usage::

    sampler = ClientSampler(interval_s=1.0, device="worker-0")
    sampler.start()
    ...
    sampler.max_cpu_pct(step_start_unix, step_end_unix)
    sampler.stop()
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psutil

from capacity_plugins.host import NativeLoop, real_lock

# 1 h at 1 Hz per process; step windows are far shorter, old samples are only needed for a soak report.
_MAX_SAMPLES = 3600 * 4


class ClientSampler:
    def __init__(self, interval_s: float = 1.0, *, device: str = "local", host: str | None = None,
                 on_sample: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.interval_s = float(interval_s)
        self.device = device
        self.host = host or socket.gethostname()
        self._on_sample = on_sample
        self._proc = psutil.Process()
        self._samples: deque[dict[str, Any]] = deque(maxlen=_MAX_SAMPLES)
        self._lock = real_lock()
        self._loop = NativeLoop("client-sampler", self.interval_s, self._sample_once)
        self._primed = False

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _sample_once(self) -> None:
        if not self._primed:
            # The loop's first tick only sets the baseline of both cpu_percent() calls, one
            # interval before the first sample. A baseline taken just before the first tick (as
            # it once was) measured CPU time, counted in 10 ms clock ticks, over a millisecond:
            # one tick read as 1917 %, a step flagged "generator CPU above 90 %" by nothing.
            self._proc.cpu_percent(None)
            psutil.cpu_percent(None)
            self._primed = True
            return
        sample = {
            "unix": time.time(),
            "cpu_pct": float(self._proc.cpu_percent(None)),
            "system_cpu_pct": float(psutil.cpu_percent(None)),
            "rss_bytes": int(self._proc.memory_info().rss),
        }
        with self._lock:
            self._samples.append(sample)
        if self._on_sample is not None:
            self._on_sample(sample)

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._samples[-1]) if self._samples else None

    def samples_since(self, unix: float) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(s) for s in self._samples if s["unix"] >= unix]

    def max_cpu_pct(self, start_unix: float, end_unix: float) -> float | None:
        """Highest per-interval process CPU % among samples taken in [start, end]; None if none."""
        with self._lock:
            values = [s["cpu_pct"] for s in self._samples if start_unix <= s["unix"] <= end_unix]
        return max(values) if values else None

    def series_rows(self, samples: list[dict[str, Any]],
                    step_of: Callable[[float], int | None] = lambda t: None) -> list[dict[str, Any]]:
        """telemetry_series.csv rows (docs/results.md) for these samples."""
        rows = []
        for s in samples:
            step = step_of(s["unix"])
            for series, key, unit in (("client_cpu_pct", "cpu_pct", "%"),
                                      ("client_system_cpu_pct", "system_cpu_pct", "%"),
                                      ("client_rss_bytes", "rss_bytes", "bytes")):
                rows.append({"unix": s["unix"], "step": step, "host": self.host, "device": self.device,
                             "series": series, "value": s[key], "unit": unit})
        return rows
