"""Local GPU readings through NVML (`nvidia-ml-py`, imported as `pynvml`).

A host without a driver or GPU is normal (the load generator usually runs on a CPU box): the
sampler logs one info line, reports `available = False` and returns no readings; it never
raises. Calls a device does not support return None for that field only. NVML calls are
blocking C calls, so periodic sampling runs in a native thread (see `host.py`).

Units in a reading: percent, bytes, °C, watts (NVML's mW / 1000), MHz. `clock_event_reasons` is
NVML's bitmask; `clock_event_reason_names` decodes it (SwPowerCap or a thermal bit means the
measured throughput is power- or heat-limited).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from capacity_plugins.host import NativeLoop, real_lock

logger = logging.getLogger(__name__)

# Test hook (hidden from --help): import this module instead of pynvml, e.g. "fake_nvml".
FAKE_NVML_ENV = "CAPACITY_FAKE_NVML"

CLOCK_EVENT_REASONS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}

# NVML_VALUE_NOT_AVAILABLE is -1 cast to the field's unsigned type.
_SENTINELS = {0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, -1}

FIELDS = ("util_gpu_pct", "util_mem_pct", "vram_used_bytes", "vram_total_bytes", "temp_c", "power_w",
          "power_limit_w", "sm_clock_mhz", "clock_event_reasons")

_held_locks: dict[str, int] = {}


def decode_clock_event_reasons(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def acquire_host_lock(name: str) -> bool:
    """True for exactly one process per host holding `name` (non-blocking flock in the temp dir).

    With `locust --processes N` every worker would otherwise sample the same GPUs. The lock is
    released when the holding process exits, so a crashed holder never blocks the next run.
    """
    if name in _held_locks:
        return True
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    path = os.path.join(tempfile.gettempdir(), f"capacity-{safe}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held_locks[name] = fd
    return True


def release_host_lock(name: str) -> None:
    fd = _held_locks.pop(name, None)
    if fd is not None:
        os.close(fd)


def load_nvml_module() -> ModuleType | None:
    fake = os.environ.get(FAKE_NVML_ENV)
    try:
        return importlib.import_module(fake or "pynvml")
    except ImportError:
        return None


def _clean(value: Any) -> Any:
    if isinstance(value, int) and value in _SENTINELS:
        return None
    return value


class NvmlSampler:
    def __init__(self, interval_s: float = 1.0, nvml_module: ModuleType | None = None) -> None:
        self.interval_s = float(interval_s)
        self.available = False
        self.reason: str | None = None
        self.host = socket.gethostname()
        self.driver_version: str | None = None
        self._nvml = nvml_module if nvml_module is not None else load_nvml_module()
        self._handles: list[Any] = []
        self._static: list[dict[str, Any]] = []
        self._loop: NativeLoop | None = None
        self._lock = real_lock()
        self._init()

    def _init(self) -> None:
        nv = self._nvml
        if nv is None:
            self.reason = "nvidia-ml-py is not installed"
        else:
            try:
                nv.nvmlInit()
                count = nv.nvmlDeviceGetCount()
                self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except nv.NVMLError as e:
                self.reason = f"{type(e).__name__}: {e}"
            except OSError as e:  # a broken libnvidia-ml.so that ctypes cannot load
                self.reason = f"{type(e).__name__}: {e}"
            else:
                if not self._handles:
                    self.reason = "NVML found no GPU"
                    self._shutdown()
        if self.reason:
            logger.info("GPU sampling off on %s: %s", self.host, self.reason)
            return
        assert nv is not None
        self.available = True
        self.driver_version = _as_str(self._call(getattr(nv, "nvmlSystemGetDriverVersion", None)))
        for i, h in enumerate(self._handles):
            self._static.append({"index": i, "uuid": _as_str(self._call(nv.nvmlDeviceGetUUID, h)),
                                 "name": _as_str(self._call(nv.nvmlDeviceGetName, h))})

    @property
    def lock_name(self) -> str:
        """Host-lock name for "one NVML sampler per host" (per bindings module, so a test fake never
        competes with the real driver)."""
        return f"nvml-{getattr(self._nvml, '__name__', 'none')}"

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):  # shutting down a half-initialised NVML is best effort
            self._nvml.nvmlShutdown()  # type: ignore[union-attr]

    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError:  # type: ignore[union-attr]  # NotSupported, NoPermission, GpuIsLost…
            return None

    def _first(self, names: tuple[str, ...], *args: Any) -> Any:
        """The first of these calls that answers; newer names first, deprecated ones as fallback."""
        for name in names:
            value = self._call(getattr(self._nvml, name, None), *args)
            if value is not None:
                return value
        return None

    def gpus(self) -> list[dict[str, Any]]:
        """index, uuid and name of each GPU (static; for provenance)."""
        return [dict(s) for s in self._static]

    def read(self) -> list[dict[str, Any]]:
        """One reading per GPU now; [] when NVML is unavailable."""
        if not self.available:
            return []
        nv = self._nvml
        assert nv is not None
        out = []
        with self._lock:
            for static, h in zip(self._static, self._handles, strict=True):
                util = self._call(nv.nvmlDeviceGetUtilizationRates, h)
                mem = self._call(nv.nvmlDeviceGetMemoryInfo, h)
                temp = self._first(("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
                                   h, nv.NVML_TEMPERATURE_GPU)
                power_mw = _clean(self._call(nv.nvmlDeviceGetPowerUsage, h))
                limit_mw = _clean(self._call(getattr(nv, "nvmlDeviceGetEnforcedPowerLimit", None), h))
                reasons = _clean(self._first(("nvmlDeviceGetCurrentClocksEventReasons",
                                              "nvmlDeviceGetCurrentClocksThrottleReasons"), h))
                out.append({
                    **static,
                    "util_gpu_pct": _clean(util.gpu) if util is not None else None,
                    "util_mem_pct": _clean(util.memory) if util is not None else None,
                    "vram_used_bytes": _clean(mem.used) if mem is not None else None,
                    "vram_total_bytes": _clean(mem.total) if mem is not None else None,
                    "temp_c": _clean(temp),
                    "power_w": None if power_mw is None else power_mw / 1000.0,
                    "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
                    "sm_clock_mhz": _clean(self._call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
                    "clock_event_reasons": reasons,
                    "clock_event_reason_names": decode_clock_event_reasons(reasons),
                })
        return out

    def start(self, callback: Callable[[list[dict[str, Any]], float], None]) -> None:
        """Call `callback(readings, unix)` every interval from a native thread (no-op when unavailable)."""
        if not self.available or self._loop is not None:
            return

        def tick() -> None:
            unix = time.time()
            callback(self.read(), unix)

        self._loop = NativeLoop("nvml-sampler", self.interval_s, tick)
        self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def close(self) -> None:
        self.stop()
        if self.available:
            self.available = False
            self._shutdown()


def _as_str(value: Any) -> str | None:
    if isinstance(value, bytes):  # nvidia-ml-py < 11.515 returned bytes
        return value.decode(errors="replace")
    return value
