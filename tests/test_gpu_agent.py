"""`capacity gpu-agent` as a real subprocess with the fake NVML module, scraped over HTTP."""

import json
import socket
import subprocess
import time

import pytest
from helpers import fake_nvml
from helpers.paths import TESTS
from helpers.ports import free_port
from helpers.processes import CAPACITY, Watch, capacity, env_with, popen
from helpers.waiting import wait_until

from capacity_plugins.telemetry.maps import MIB, SeriesTracker, guess_kind, normalize
from capacity_plugins.telemetry.scrape import ScrapeTarget


def _env(scenario: str) -> dict[str, str]:
    nvml = fake_nvml.subprocess_env(scenario)
    return env_with(path=[TESTS], CAPACITY_FAKE_NVML=nvml["CAPACITY_FAKE_NVML"],
                    FAKE_NVML_SCENARIO=nvml["FAKE_NVML_SCENARIO"])


def _agent(scenario: str, *args: str) -> subprocess.Popen:
    return popen([*CAPACITY, "gpu-agent", *args], env=_env(scenario), stderr=subprocess.PIPE)


def _gpu_agent(scenario: str, *args: str) -> subprocess.CompletedProcess[str]:
    return capacity("gpu-agent", *args, env=_env(scenario), timeout=60)


def _scrape_when_up(url: str, proc: subprocess.Popen, timeout_s: float = 30):
    target = ScrapeTarget(url)

    def served():
        result = target.scrape(timeout_s=2)
        return result if result.error is None else None

    return target, wait_until(served, timeout_s, f"the agent to serve {url}", Watch(proc), interval=0.1)


def _stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    return proc.returncode, out, err


def test_agent_serves_dcgm_names_and_units():
    port = free_port()
    proc = _agent("two_gpus", "--port", str(port), "--interval", "0.2")
    try:
        target, result = _scrape_when_up(f"http://127.0.0.1:{port}/metrics", proc)
        time.sleep(0.5)
        second = target.scrape(timeout_s=2)
    finally:
        code, out, err = _stop(proc)
    assert code == 0, err
    assert "serving 2 GPU(s)" in out
    names = {s.name for s in result.samples}
    assert guess_kind(names) == "gpu-agent"
    by = {(s.name, s.labels.get("gpu")): s for s in result.samples}
    fb = by[("DCGM_FI_DEV_FB_USED", "0")]
    assert fb.value == 60 * 1024                                   # MiB, like DCGM
    assert fb.labels["UUID"].startswith("GPU-") and fb.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert fb.labels["Hostname"] == socket.gethostname()
    assert by[("DCGM_FI_DEV_POWER_USAGE", "1")].value == pytest.approx(512.345)   # W, not mW
    assert by[("capacity_gpu_vram_total_bytes", "0")].value == 80 * 2**30
    assert by[("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "0")].value == 0x24
    active = {s.labels["reason"] for s in result.samples
              if s.name == "capacity_gpu_clock_event_reason" and s.labels["gpu"] == "0" and s.value == 1}
    assert active == {"SwPowerCap", "SwThermalSlowdown"}
    # readings move between scrapes (sampled every interval, not frozen at start)
    u1 = by[("DCGM_FI_DEV_GPU_UTIL", "0")].value
    u2 = {(s.name, s.labels.get("gpu")): s.value for s in second.samples}[("DCGM_FI_DEV_GPU_UTIL", "0")]
    assert u1 != u2
    # and the gpu-agent map normalises it back to base units
    rows = SeriesTracker().rows(normalize("gpu-agent", result.samples, target.default_host), 1.0)
    series = {(r["device"], r["series"]): r["value"] for r in rows}
    assert series[("0", "vram_used_bytes")] == 60 * 1024 * MIB
    assert series[("0", "vram_total_bytes")] == 80 * 2**30
    assert series[("1", "gpu_power_limit_w")] == 700.0


def test_agent_partial_support_omits_unsupported_samples():
    port = free_port()
    proc = _agent("partial", "--port", str(port), "--interval", "0.2")
    try:
        _, result = _scrape_when_up(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        _stop(proc)
    names = {s.name for s in result.samples}
    assert "DCGM_FI_DEV_GPU_TEMP" in names and "DCGM_FI_DEV_POWER_USAGE" not in names
    assert "DCGM_FI_DEV_FB_USED" not in names                 # sentinel value, not a number
    assert all(s.value < 1e15 for s in result.samples)


def test_agent_without_driver_still_serves_and_says_why():
    port = free_port()
    proc = _agent("no_driver", "--port", str(port))
    try:
        _, result = _scrape_when_up(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        code, _, err = _stop(proc)
    assert code == 0
    (up,) = [s for s in result.samples if s.name == "capacity_gpu_nvml_available"]
    assert up.value == 0 and "LibraryNotFound" in up.labels["reason"]
    assert not any(s.name.startswith("DCGM_") for s in result.samples)
    assert "GPU sampling off" in err and "Traceback" not in err


def test_check_prints_json_verdict():
    ok = _gpu_agent("partial", "--check", "--seconds", "0.6", "--interval", "0.2")
    assert ok.returncode == 1, ok.stderr                      # partial: vram used unsupported -> not ok
    report = json.loads(ok.stdout)
    (gpu,) = report["gpus"]
    assert gpu["samples"] >= 3 and "power_w" in gpu["unsupported"]
    assert gpu["fields"]["temp_c"]["max"] == 61

    good = _gpu_agent("two_gpus", "--check", "--seconds", "0.4", "--interval", "0.2")
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert report["ok"] and len(report["gpus"]) == 2
    assert report["gpus"][0]["fields"]["clock_event_reasons"]["seen"] == ["SwPowerCap", "SwThermalSlowdown"]

    none = _gpu_agent("no_driver", "--check", "--seconds", "0.2")
    assert none.returncode == 1
    assert json.loads(none.stdout)["verdict"].startswith("no GPU sampling on this host: NVMLError_LibraryNotFound")


def test_bad_flags_and_busy_port_are_one_line_errors():
    bad = _gpu_agent("two_gpus", "--port", "70000")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--port 70000" in bad.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = _gpu_agent("no_gpu", "--port", str(s.getsockname()[1]))
    assert busy.returncode == 1 and "cannot listen" in busy.stderr and "Traceback" not in busy.stderr
