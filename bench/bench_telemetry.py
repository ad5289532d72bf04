"""Telemetry overhead inside a Locust (gevent) process.

1. Parse + normalise cost of one realistic scrape (vLLM with 2 engines + DCGM with 2 GPUs, the
   canned texts of the tests), as a share of a 1 s scrape interval.
2. Hub responsiveness: the worst gap of a 10 ms ticker greenlet while a TelemetryCollector scrapes
   three endpoints at 10 Hz in its native threads, as a ratio to the same ticker with no collector.
   (A collector running in the hub would show its scrape time as the gap.)
3. The same while NVML (the tests' fake, blocking its OS thread 0.7 s per reading) and an endpoint
   that never answers in time are sampled: the worst gap against the 0.7 s block (goal: below
   0.45 s, ratio < 0.64; 1.0 would mean the hub waited for NVML).
4. A good endpoint's scrape cadence next to one that hangs past its 0.8 s timeout: scrapes per
   second against the 4 Hz interval (goal ratio ≥ 0.6; scraped in series it would be ≤ 0.375).
5. What ClientSampler reads for this process: a spinning loop (goal > 40 % of a core) and idle
   (goal < 30 %). On a loaded machine the loop gets less of a core: that is the machine, not
   the sampler — which is why the tests no longer assert these numbers.
"""

import locust  # noqa: F401, I001  (monkey-patches first, as in a real run)

import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import gevent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers import fake_nvml
from helpers.canned_metrics import dcgm_text, vllm_text
from helpers.servers import canned_metrics_server

from capacity_plugins.telemetry.client import ClientSampler
from capacity_plugins.telemetry.collector import TelemetryCollector
from capacity_plugins.telemetry.maps import SeriesTracker, normalize
from capacity_plugins.telemetry.scrape import ScrapeTarget, parse_exposition


def parse_cost() -> None:
    texts = [vllm_text(k) + dcgm_text(k) for k in range(1, 201)]
    tracker = SeriesTracker()
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        tracker.rows(normalize("simulator", parse_exposition(text), "h:1"), float(i))
    per = (time.perf_counter() - t0) / len(texts)
    print(f"parse+normalise one vLLM+DCGM scrape ({len(texts[0].splitlines())} lines): {per * 1e3:.2f} ms "
          f"= {per * 100:.2f} % of a 1 s interval")


def worst_gap(seconds: float) -> float:
    ticks: list[float] = []

    def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            gevent.sleep(0.01)

    g = gevent.spawn(ticker)
    gevent.sleep(seconds)
    g.kill()
    return max(b - a for a, b in zip(ticks, ticks[1:], strict=False))


def hub_stall(url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        baseline = worst_gap(3.0)
        targets = [ScrapeTarget(url + p) for p in ("/vllm/metrics", "/dcgm/metrics", "/tgi/metrics")]
        c = TelemetryCollector(targets, interval_s=0.1, out_dir=Path(tmp))
        c.start()
        loaded = worst_gap(3.0)
        c.stop()
        print(f"worst 10 ms-ticker gap: {baseline * 1e3:.1f} ms alone, {loaded * 1e3:.1f} ms with a 3-target "
              f"10 Hz collector ({c.scrapes} scrapes) -> ratio {loaded / baseline:.2f}")


def hub_stall_blocking_nvml(url: str) -> None:
    block_s = 0.7
    os.environ["CAPACITY_FAKE_NVML"] = fake_nvml.MODULE
    fake_nvml.configure(gpus=[fake_nvml.FakeGpu(block_s=block_s)])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            c = TelemetryCollector([ScrapeTarget(url + "/slow/metrics")], interval_s=0.5, out_dir=Path(tmp),
                                   nvml=True, timeout_s=0.4)
            c.start()
            gap = worst_gap(3.0)
            c.stop()
    finally:
        fake_nvml.configure(None)
        del os.environ["CAPACITY_FAKE_NVML"]
    print(f"worst 10 ms-ticker gap while NVML blocks {block_s:g} s per reading and an endpoint times out: "
          f"{gap * 1e3:.1f} ms (goal < 450 ms) -> ratio to the block {gap / block_s:.2f} (goal < 0.64)")


def hung_endpoint_cadence(url: str) -> None:
    interval_s, seconds = 0.25, 4.0
    with tempfile.TemporaryDirectory() as tmp:
        good = ScrapeTarget(url + "/tgi/metrics")
        c = TelemetryCollector([ScrapeTarget(url + "/slow/metrics"), good], interval_s=interval_s,
                               out_dir=Path(tmp), timeout_s=0.8)
        c.start()
        time.sleep(seconds)
        c.stop()
        with (Path(tmp) / "telemetry.csv").open(newline="") as f:
            scrapes = {row["unix"] for row in csv.DictReader(f) if row["source"] == good.url}
    rate = len(scrapes) / seconds
    print(f"good endpoint next to one hanging past its 0.8 s timeout: {rate:.2f} scrapes/s at a "
          f"{1 / interval_s:g} Hz interval -> ratio {rate * interval_s:.2f} (goal >= 0.6; in series <= 0.375)")


def client_cpu() -> None:
    sampler = ClientSampler(interval_s=0.2)
    sampler.start()
    t0 = time.time()
    time.sleep(1.0)
    t_busy = time.time()
    end = time.perf_counter() + 1.5
    x = 0
    while time.perf_counter() < end:
        x += 1
    t_busy_end = time.time()
    sampler.stop()
    idle = sampler.max_cpu_pct(t0 + 0.25, t_busy) or 0.0
    busy = sampler.max_cpu_pct(t_busy + 0.25, t_busy_end) or 0.0
    print(f"ClientSampler on this process: spinning loop {busy:.1f} % of a core (goal > 40 %, ratio "
          f"{busy / 40:.2f}), idle {idle:.1f} % (goal < 30 %, ratio {idle / 30:.2f})")


if __name__ == "__main__":
    parse_cost()
    with canned_metrics_server() as server:
        hub_stall(server.url)
        hub_stall_blocking_nvml(server.url)
        hung_endpoint_cadence(server.url)
    client_cpu()
