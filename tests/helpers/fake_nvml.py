"""A stand-in for NVIDIA's `pynvml` (nvidia-ml-py 13.x) with the real API's shapes and units.

Used where no NVIDIA GPU exists. Shapes copied from the real bindings: power in milliwatts,
memory in bytes, `nvmlDeviceGetName`/`GetUUID` return str, errors are `NVMLError` subclasses
created per code (`NVMLError(3)` is an `NVMLError_NotSupported`), unavailable counters can read
as NVML_VALUE_NOT_AVAILABLE (all bits set).

The scenario is picked by `configure(...)` in-process or by the env var FAKE_NVML_SCENARIO in a
subprocess: `two_gpus` (default), `no_gpu`, `no_driver` (NVMLError_LibraryNotFound at init),
`driver_not_loaded`, `partial` (one old GPU: NotSupported power/clock reasons, FunctionNotFound
for the new temperature and clock-event calls, sentinel memory counters).

The product imports it by name: CAPACITY_FAKE_NVML=helpers.fake_nvml (`MODULE`), with tests/ on
PYTHONPATH in a subprocess (`subprocess_env()`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

MODULE = "helpers.fake_nvml"  # what CAPACITY_FAKE_NVML names (its __name__ when the product imports it)
_TESTS = Path(__file__).resolve().parents[1]


def subprocess_env(scenario: str | None = None) -> dict[str, str]:
    """The variables a subprocess needs to sample this fake instead of the real driver (PYTHONPATH:
    the tests folder only; helpers.processes.env_with(path=[TESTS], ...) keeps the rest)."""
    env = {"PYTHONPATH": str(_TESTS), "CAPACITY_FAKE_NVML": MODULE}
    if scenario is not None:
        env["FAKE_NVML_SCENARIO"] = scenario
    return env

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_VALUE_NOT_AVAILABLE_uint = 0xFFFFFFFF
NVML_VALUE_NOT_AVAILABLE_ulonglong = 0xFFFFFFFFFFFFFFFF

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonSwPowerCap = 0x4

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}
    value: int

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self):
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _make_error_classes() -> None:
    # Same naming rule as the real bindings: NVML_ERROR_NOT_SUPPORTED -> NVMLError_NotSupported.
    for name, value in list(globals().items()):
        if name.startswith("NVML_ERROR_"):
            cls_name = "NVMLError_" + "".join(p.capitalize() for p in name[len("NVML_ERROR_"):].split("_"))
            cls = type(cls_name, (NVMLError,), {"__new__": lambda c, v=value: Exception.__new__(c)})

            def _init(self, v=value):
                self.value = v

            cls.__init__ = _init  # type: ignore[misc]
            globals()[cls_name] = cls
            NVMLError._valClassMapping[value] = cls


_make_error_classes()


class c_nvmlUtilization_t:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total_bytes: int = 80 * 2**30
    power_limit_mw: int = 700_000
    legacy: bool = False           # old driver: only the deprecated temperature / throttle calls
    unsupported: set[str] = field(default_factory=set)   # call names raising NotSupported
    sentinel_memory: bool = False  # memory counters read NVML_VALUE_NOT_AVAILABLE
    block_s: float = 0.0           # utilisation call blocks the OS thread this long, like a slow C call
    calls: int = 0
    blocked: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each block, monotonic


def _real_sleep(seconds: float) -> None:
    # time.sleep may be gevent's (patched by Locust); a C call blocks the whole OS thread instead.
    try:
        from gevent import monkey

        monkey.get_original("time", "sleep")(seconds)
    except ImportError:
        import time

        time.sleep(seconds)

_config: dict = {"scenario": None, "gpus": None, "init_error": None}
_initialised = 0


def configure(scenario: str | None = None, *, gpus: list[FakeGpu] | None = None,
              init_error: int | None = None) -> None:
    """Set the fake machine (in-process tests); None falls back to FAKE_NVML_SCENARIO."""
    global _initialised
    _config.update(scenario=scenario, gpus=gpus, init_error=init_error)
    _initialised = 0


def _scenario() -> tuple[list[FakeGpu], int | None]:
    if _config["gpus"] is not None or _config["init_error"] is not None:
        return _config["gpus"] or [], _config["init_error"]
    scenario = _config["scenario"] or os.environ.get("FAKE_NVML_SCENARIO", "two_gpus")
    if scenario == "no_driver":
        return [], NVML_ERROR_LIBRARY_NOT_FOUND
    if scenario == "driver_not_loaded":
        return [], NVML_ERROR_DRIVER_NOT_LOADED
    if scenario == "no_gpu":
        return [], None
    if scenario == "partial":
        return [FakeGpu(name="Tesla T4", uuid="GPU-7e57a000-0000-0000-0000-000000000001",
                        total_bytes=16 * 2**30, legacy=True, sentinel_memory=True,
                        unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"})], None
    return [FakeGpu(uuid=f"GPU-a11ce000-0000-0000-0000-00000000000{i}") for i in range(2)], None


_gpus: list[FakeGpu] = []


def nvmlInit() -> None:
    global _initialised, _gpus
    gpus, err = _scenario()
    if err is not None:
        raise NVMLError(err)
    if _initialised == 0:
        _gpus = gpus
    _initialised += 1


def nvmlShutdown() -> None:
    global _initialised
    if _initialised == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _initialised -= 1


def _check() -> None:
    if _initialised == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlDeviceGetCount() -> int:
    _check()
    return len(_gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
    _check()
    return _gpus[index]


def _gate(h: FakeGpu, call: str) -> None:
    _check()
    if call in h.unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetName(h: FakeGpu) -> str:
    _gate(h, "nvmlDeviceGetName")
    return h.name


def nvmlDeviceGetUUID(h: FakeGpu) -> str:
    _gate(h, "nvmlDeviceGetUUID")
    return h.uuid


def _phase(h: FakeGpu) -> int:
    # Readings move with each call so a scraper can see them change.
    h.calls += 1
    return h.calls


def nvmlDeviceGetUtilizationRates(h: FakeGpu) -> c_nvmlUtilization_t:
    _gate(h, "nvmlDeviceGetUtilizationRates")
    if h.block_s:
        start = time.monotonic()
        _real_sleep(h.block_s)
        h.blocked.append((start, time.monotonic()))
    k = _phase(h)
    return c_nvmlUtilization_t(gpu=40 + (k % 50), memory=20 + (k % 30))


def nvmlDeviceGetMemoryInfo(h: FakeGpu, version=None) -> c_nvmlMemory_t:
    _gate(h, "nvmlDeviceGetMemoryInfo")
    if h.sentinel_memory:
        s = NVML_VALUE_NOT_AVAILABLE_ulonglong
        return c_nvmlMemory_t(total=h.total_bytes, free=s, used=s)
    used = 60 * 2**30 if h.total_bytes >= 60 * 2**30 else h.total_bytes // 2
    return c_nvmlMemory_t(total=h.total_bytes, free=h.total_bytes - used, used=used)


def nvmlDeviceGetTemperature(h: FakeGpu, sensor: int) -> int:
    _gate(h, "nvmlDeviceGetTemperature")
    return 61


def nvmlDeviceGetTemperatureV(h: FakeGpu, sensor: int, version=None) -> int:
    if h.legacy:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    _gate(h, "nvmlDeviceGetTemperatureV")
    return 62


def nvmlDeviceGetPowerUsage(h: FakeGpu) -> int:
    _gate(h, "nvmlDeviceGetPowerUsage")
    return 512_345  # mW


def nvmlDeviceGetEnforcedPowerLimit(h: FakeGpu) -> int:
    _gate(h, "nvmlDeviceGetEnforcedPowerLimit")
    return h.power_limit_mw


def nvmlDeviceGetClockInfo(h: FakeGpu, clock_type: int) -> int:
    _gate(h, "nvmlDeviceGetClockInfo")
    return 1755 if clock_type == NVML_CLOCK_SM else 2619


def nvmlDeviceGetCurrentClocksEventReasons(h: FakeGpu) -> int:
    if h.legacy:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    _gate(h, "nvmlDeviceGetCurrentClocksEventReasons")
    return nvmlClocksEventReasonSwPowerCap | nvmlClocksEventReasonSwThermalSlowdown


def nvmlDeviceGetCurrentClocksThrottleReasons(h: FakeGpu) -> int:
    _gate(h, "nvmlDeviceGetCurrentClocksThrottleReasons")
    return nvmlClocksThrottleReasonGpuIdle


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return "550.54.15"
