"""Scrape the embedded simulator while real requests load it: vLLM and DCGM-named series move with the
load and every row carries its step."""

import csv
import json
import time
import urllib.request

import gevent
import pytest

from capacity_plugins.telemetry.collector import TelemetryCollector
from capacity_plugins.telemetry.scrape import ScrapeTarget


def _chat(url: str) -> None:
    body = json.dumps({"model": "sim-model", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "count to sixty-four please"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def test_simulator_series_move_with_load_and_carry_steps(start_simulator, tmp_path):
    # slow decode so 8 concurrent requests keep the batch busy for a few scrapes
    sim = start_simulator(max_num_seqs=4, decode_base_ms=20.0, force_max_tokens=True)
    bounds: list[float] = [time.time()]

    def step_of(unix):
        if unix < bounds[0]:
            return None
        return 0 if len(bounds) == 1 or unix < bounds[1] else 1

    collector = TelemetryCollector([ScrapeTarget(sim.url)], interval_s=0.3, out_dir=tmp_path, step_of=step_of)
    collector.start()
    gevent.sleep(1.0)                              # step 0: idle
    bounds.append(time.time())                     # step 1: 8 concurrent streams of 64 tokens
    workers = [gevent.spawn(_chat, sim.url) for _ in range(8)]
    gevent.joinall(workers, timeout=60, raise_error=True)
    collector.stop()

    with (tmp_path / "telemetry_series.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert collector.gaps == []
    assert collector.provenance()["targets"][ScrapeTarget(sim.url).url]["kind"] == "simulator"

    def values(series, step):
        return [float(r["value"]) for r in rows if r["series"] == series and r["step"] == str(step)]

    assert values("server_running", 0) and max(values("server_running", 0)) == 0
    assert max(values("server_running", 1)) >= 3
    assert max(values("server_waiting", 1)) >= 1               # 8 requests, 4 slots
    assert max(values("gpu_util_pct", 1)) > max(values("gpu_util_pct", 0))
    assert max(values("gpu_power_w", 1)) > min(values("gpu_power_w", 0))
    assert values("server_ttft_s", 1) and all(v > 0 for v in values("server_ttft_s", 1))
    assert values("server_output_tps", 1) and max(values("server_output_tps", 1)) > 0
    assert values("vram_used_bytes", 0)[0] == pytest.approx(int(24576 * 0.9) * 2**20)
    assert {r["step"] for r in rows} <= {"0", "1", ""}
