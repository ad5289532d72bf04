"""TelemetryCollector end to end: real loopback endpoints (good, garbage, down, slow), local NVML via the
fake module, the two CSV files with their exact columns, gaps, provenance, and gevent friendliness."""

import csv
import json
import time

import gevent
import pytest
from helpers import fake_nvml
from helpers.canned_metrics import GPU_MODEL, VLLM_MODEL
from helpers.ports import free_port

from capacity_plugins.telemetry.client import ClientSampler
from capacity_plugins.telemetry.collector import TelemetryCollector
from capacity_plugins.telemetry.files import RAW_COLUMNS, SERIES_COLUMNS
from capacity_plugins.telemetry.scrape import ScrapeTarget


def _read(path):
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return header, [dict(zip(header, row, strict=True)) for row in reader]


@pytest.fixture
def fake_nvml_env(monkeypatch):
    monkeypatch.setenv("CAPACITY_FAKE_NVML", fake_nvml.MODULE)
    fake_nvml.configure("two_gpus")
    yield
    fake_nvml.configure(None)


def test_collects_series_raw_rows_gaps_and_provenance(canned_url, tmp_path, fake_nvml_env):
    t_start = time.time()

    def step_of(unix):  # two steps of 0.5 s each, then nothing
        k = int((unix - t_start) / 0.5)
        return k if k < 2 else None

    targets = [ScrapeTarget(canned_url + "/vllm/metrics"),               # kind guessed
               ScrapeTarget(canned_url + "/dcgm/metrics", kind="dcgm"),
               ScrapeTarget(canned_url + "/garbage/metrics"),
               ScrapeTarget(f"http://127.0.0.1:{free_port()}/metrics")]  # nothing listens
    collector = TelemetryCollector(targets, interval_s=0.25, out_dir=tmp_path, step_of=step_of, nvml=True)
    client = ClientSampler(interval_s=0.25, device="worker-1")
    collector.start()
    client.start()
    time.sleep(1.3)
    client.stop()
    collector.add_series_rows(client.series_rows(client.samples_since(0), step_of))
    collector.stop()
    collector.stop()  # twice is harmless

    header, raw = _read(tmp_path / "telemetry.csv")
    assert tuple(header) == RAW_COLUMNS
    header, series = _read(tmp_path / "telemetry_series.csv")
    assert tuple(header) == SERIES_COLUMNS

    # raw: histograms kept as _bucket/_sum/_count, labels as JSON, python_ noise left out, NVML source
    vllm_url = targets[0].url
    ttft_count = [r for r in raw if r["source"] == vllm_url and r["metric"] == "vllm:time_to_first_token_seconds_count"]
    assert ttft_count and json.loads(ttft_count[0]["labels"])["model_name"] == VLLM_MODEL
    assert any(r["metric"].endswith("_bucket") for r in raw)
    assert not any(r["metric"].startswith("python_") for r in raw)
    nvml_rows = [r for r in raw if r["source"].startswith("nvml://")]
    assert {r["metric"] for r in nvml_rows} >= {"power_w", "vram_used_bytes", "util_gpu_pct"}

    # normalised: exact delta means, units, steps tagged from step_of
    ttft = [r for r in series if r["series"] == "server_ttft_s"]
    assert len(ttft) >= 3 and all(float(r["value"]) == pytest.approx(0.25) for r in ttft)
    assert {r["step"] for r in series} >= {"0", "1"}
    vram = [r for r in series if r["series"] == "vram_used_bytes" and r["host"] == "gpu-node-1"]
    assert vram and float(vram[0]["value"]) == 61440 * 2**20 and vram[0]["unit"] == "bytes"
    assert collector._nvml is not None
    nvml_power = [r for r in series if r["series"] == "gpu_power_w" and r["host"] == collector._nvml.host]
    assert nvml_power and float(nvml_power[0]["value"]) == pytest.approx(512.345)
    cpu = [r for r in series if r["series"] == "client_cpu_pct"]
    assert cpu and all(r["device"] == "worker-1" for r in cpu)

    # gaps: the bad endpoints, each with its reason, many times; the good ones never
    gaps = collector.gaps
    reasons = {g["url"]: g["reason"] for g in gaps}
    assert "malformed" in reasons[targets[2].url]
    assert "unreachable" in reasons[targets[3].url]
    assert targets[0].url not in reasons and targets[1].url not in reasons
    assert sum(g["url"] == targets[3].url for g in gaps) >= 3

    latest = collector.latest()
    assert latest["gpu-node-1"]["1"]["gpu_util_pct"]["value"] == 91
    assert latest[targets[0].default_host][VLLM_MODEL]["server_running"] == {
        "value": 20.0, "unit": "requests", "unix": pytest.approx(time.time(), abs=30)}

    prov = collector.provenance()
    assert prov["gpu_models"] == sorted({GPU_MODEL, "NVIDIA H100 80GB HBM3"})
    assert prov["served_models"] == [VLLM_MODEL]
    assert prov["targets"][vllm_url]["kind"] == "vllm"
    assert prov["targets"][vllm_url]["info"]["vllm:cache_config_info"]["block_size"] == "16"
    assert len(prov["nvml"]["gpus"]) == 2


def test_files_append_without_second_header(canned_url, tmp_path):
    for _ in range(2):
        c = TelemetryCollector([ScrapeTarget(canned_url + "/sglang/metrics")], interval_s=0.2, out_dir=tmp_path)
        c.tick()
        c.stop()
    lines = (tmp_path / "telemetry_series.csv").read_text().splitlines()
    assert lines[0] == ",".join(SERIES_COLUMNS)
    assert sum(line == lines[0] for line in lines) == 1 and len(lines) > 4


def test_unrecognised_metrics_are_kept_raw_and_reported_once(tmp_path, canned_url):
    c = TelemetryCollector([ScrapeTarget(canned_url + "/custom/metrics")], interval_s=0.2, out_dir=tmp_path)
    c.tick()
    c.tick()
    c.stop()
    assert [g["reason"] for g in c.gaps] == [
        "metric names not recognised: raw samples kept, no normalised series (set the target's kind)"]
    _, raw = _read(tmp_path / "telemetry.csv")
    assert [(r["metric"], r["value"]) for r in raw] == [("myapp_queue_depth", "3.0")] * 2  # never started: no final scrape
    _, series = _read(tmp_path / "telemetry_series.csv")
    assert series == []


def test_does_not_block_the_gevent_hub(canned_url, tmp_path, monkeypatch):
    """A ticker greenlet keeps ticking while a slow endpoint times out and NVML blocks its OS thread.

    (How long the hub's worst stall is, against a ticker alone: bench/bench_telemetry.py.)"""
    monkeypatch.setenv("CAPACITY_FAKE_NVML", fake_nvml.MODULE)
    gpu = fake_nvml.FakeGpu(block_s=0.7)
    fake_nvml.configure(gpus=[gpu])
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    g = gevent.spawn(ticker)
    try:
        c = TelemetryCollector([ScrapeTarget(canned_url + "/slow/metrics")], interval_s=0.5,
                               out_dir=tmp_path, nvml=True, timeout_s=0.4)
        c.start()
        gevent.sleep(1.6)
        c.stop()
    finally:
        g.kill()
        fake_nvml.configure(None)
    assert c.scrapes >= 2 and c.gaps and c.gaps[0]["reason"] == "timeout"
    # NVML blocked its OS thread 0.7 s at a time: had the loop run in the hub, no greenlet could run
    # during a block. The ticker ran inside every block that ended while it was alive.
    blocks = [(start, end) for start, end in gpu.blocked if end <= ticks[-1]]
    assert blocks, gpu.blocked
    for start, end in blocks:
        assert any(start < t < end for t in ticks), (start, end, "the hub stood still during an NVML call")


def test_a_hung_endpoint_does_not_delay_the_others(canned_url, tmp_path):
    good = ScrapeTarget(canned_url + "/tgi/metrics")
    c = TelemetryCollector([ScrapeTarget(canned_url + "/slow/metrics"), good], interval_s=0.25,
                           out_dir=tmp_path, timeout_s=0.8)
    c.start()
    time.sleep(2.0)
    c.stop()
    _, raw = _read(tmp_path / "telemetry.csv")
    good_scrapes = sorted({float(r["unix"]) for r in raw if r["source"] == good.url})
    # Scraped in series behind the hung endpoint, each good scrape would wait out its 0.8 s timeout:
    # consecutive ones ≥ 0.8 s apart (at most 3 in the 2 s). In parallel they keep the 0.25 s
    # interval. (The cadence itself, against the interval: bench/bench_telemetry.py.)
    assert len(good_scrapes) >= 3, good_scrapes
    assert min(b - a for a, b in zip(good_scrapes, good_scrapes[1:], strict=False)) < 0.8, good_scrapes
    assert {g["reason"] for g in c.gaps} == {"timeout"}


def test_only_one_process_per_host_samples_nvml(tmp_path, fake_nvml_env):
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from capacity_plugins.telemetry.nvml import acquire_host_lock; "
                               f"print(acquire_host_lock('nvml-{fake_nvml.MODULE}'), flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        c = TelemetryCollector([], interval_s=0.2, out_dir=tmp_path / "second", nvml=True)
        c.tick()
        c.stop()
    finally:
        holder.kill()
        holder.wait()
    _, raw = _read(tmp_path / "second" / "telemetry.csv")
    assert raw == []
    assert c.provenance()["nvml"]["unavailable"] == "another process on this host samples NVML"
    # the holder is gone: the next collector samples
    c2 = TelemetryCollector([], interval_s=0.2, out_dir=tmp_path / "third", nvml=True)
    c2.tick()
    c2.stop()
    _, raw = _read(tmp_path / "third" / "telemetry.csv")
    assert raw and all(r["source"].startswith("nvml://") for r in raw)


def test_collector_from_scenario_config(tmp_path):
    from capacity_plugins.errors import UserError
    from capacity_plugins.scenario import TelemetryConfig
    from capacity_plugins.telemetry.collector import collector_from_config

    cfg = TelemetryConfig.model_validate({"scrape": ["http://127.0.0.1:8000",
                                                     {"url": "http://127.0.0.1:9400", "kind": "dcgm"}],
                                          "nvml": False, "interval_s": 2.0})
    c = collector_from_config(cfg, out_dir=tmp_path)
    assert [(s.target.url, s.kind) for s in c._targets] == [("http://127.0.0.1:8000/metrics", None),
                                                             ("http://127.0.0.1:9400/metrics", "dcgm")]
    assert c.interval_s == 2.0 and c.timeout_s < 2.0
    # A wrong kind is refused when the scenario is loaded, naming the field, before any load runs.
    from capacity_plugins.scenario import parse_scenario

    bad = {"target": {"url": "http://127.0.0.1:8000"},
           "telemetry": {"scrape": [{"url": "http://127.0.0.1:9400", "kind": "dcgmm"}]}}
    with pytest.raises(UserError, match=r"telemetry.scrape\[0\].kind: .*unknown kind 'dcgmm'"):
        parse_scenario(bad, "s.yaml")
