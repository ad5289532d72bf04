"""NvmlSampler against the fake NVML module (real shapes/units), plus the per-host lock."""

import logging
import subprocess
import sys
import threading
import time

import pytest
from helpers import fake_nvml

from capacity_plugins.telemetry.nvml import NvmlSampler, acquire_host_lock, decode_clock_event_reasons


@pytest.fixture(autouse=True)
def _reset_fake():
    fake_nvml.configure(None)
    yield
    fake_nvml.configure(None)


def test_two_gpus_units_and_fields():
    fake_nvml.configure("two_gpus")
    s = NvmlSampler(nvml_module=fake_nvml)
    assert s.available and s.reason is None
    readings = s.read()
    assert [r["index"] for r in readings] == [0, 1]
    r = readings[0]
    assert r["uuid"].startswith("GPU-") and r["name"] == "NVIDIA H100 80GB HBM3"
    assert r["power_w"] == pytest.approx(512.345)          # mW -> W
    assert r["power_limit_w"] == pytest.approx(700.0)
    assert r["vram_total_bytes"] == 80 * 2**30               # bytes stay bytes
    assert r["vram_used_bytes"] == 60 * 2**30
    assert r["temp_c"] == 62                                 # the new TemperatureV call answered
    assert r["sm_clock_mhz"] == 1755
    assert 0 <= r["util_gpu_pct"] <= 100 and 0 <= r["util_mem_pct"] <= 100
    assert r["clock_event_reasons"] == 0x24
    assert r["clock_event_reason_names"] == ["SwPowerCap", "SwThermalSlowdown"]
    s.close()


def test_partial_support_falls_back_and_drops_sentinels():
    fake_nvml.configure("partial")
    s = NvmlSampler(nvml_module=fake_nvml)
    (r,) = s.read()
    assert r["name"] == "Tesla T4"
    assert r["power_w"] is None and r["power_limit_w"] is None      # NotSupported
    assert r["temp_c"] == 61                                         # deprecated call after FunctionNotFound
    assert r["clock_event_reasons"] == 0x1                           # ThrottleReasons fallback
    assert r["clock_event_reason_names"] == ["GpuIdle"]
    assert r["vram_used_bytes"] is None                              # NVML_VALUE_NOT_AVAILABLE
    assert r["vram_total_bytes"] == 16 * 2**30
    s.close()


@pytest.mark.parametrize("scenario,reason", [
    ("no_driver", "NVMLError_LibraryNotFound"),
    ("driver_not_loaded", "NVMLError_DriverNotLoaded"),
    ("no_gpu", "NVML found no GPU"),
])
def test_no_gpu_is_one_info_line_not_a_crash(scenario, reason, caplog):
    fake_nvml.configure(scenario)
    with caplog.at_level(logging.INFO, logger="capacity_plugins.telemetry.nvml"):
        s = NvmlSampler(nvml_module=fake_nvml)
    assert not s.available and s.reason is not None and reason in s.reason
    assert s.read() == []
    s.start(lambda readings, unix: pytest.fail("no callback without GPUs"))
    s.stop()
    infos = [r for r in caplog.records if r.name == "capacity_plugins.telemetry.nvml"]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO and reason in infos[0].getMessage()


def test_missing_bindings_module():
    import capacity_plugins.telemetry.nvml as nvml_mod

    orig = nvml_mod.load_nvml_module
    nvml_mod.load_nvml_module = lambda: None
    try:
        s = NvmlSampler()
    finally:
        nvml_mod.load_nvml_module = orig
    assert not s.available and s.reason is not None and "not installed" in s.reason


def test_start_calls_back_from_a_native_thread():
    fake_nvml.configure("two_gpus")
    s = NvmlSampler(interval_s=0.05, nvml_module=fake_nvml)
    got: list = []
    main_ident = threading.get_ident()
    s.start(lambda readings, unix: got.append((threading.get_ident(), len(readings), unix)))
    deadline = time.time() + 5
    while len(got) < 3 and time.time() < deadline:
        time.sleep(0.02)
    s.close()
    assert len(got) >= 3
    assert all(ident != main_ident and n == 2 for ident, n, _ in got)
    assert got[0][2] <= got[-1][2]


def test_decode_clock_event_reasons():
    assert decode_clock_event_reasons(None) == []
    assert decode_clock_event_reasons(0) == []
    assert decode_clock_event_reasons(0x40 | 0x8) == ["HwSlowdown", "HwThermalSlowdown"]


def test_host_lock_is_one_per_host(tmp_path):
    name = f"test-nvml-{time.time_ns()}"
    assert acquire_host_lock(name)
    assert acquire_host_lock(name)          # same process: still the holder
    code = ("import sys; from capacity_plugins.telemetry.nvml import acquire_host_lock; "
            f"sys.exit(0 if acquire_host_lock({name!r}) else 3)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert other.returncode == 3, other.stderr
    free = subprocess.run([sys.executable, "-c", code.replace(name, name + "-other")],
                          capture_output=True, timeout=60)
    assert free.returncode == 0, free.stderr
