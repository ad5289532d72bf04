"""Telemetry overhead inside a Locust (gevent) process.

1. Parse + normalise cost of one realistic scrape (vLLM with 2 engines + DCGM with 2 GPUs, the
   canned texts of the tests), as a share of a 1 s scrape interval.
2. Hub responsiveness: the worst gap of a 10 ms ticker greenlet while a TelemetryCollector scrapes
   three endpoints at 10 Hz in its native threads, as a ratio to the same ticker with no collector.
   (A collector running in the hub would show its scrape time as the gap.)
"""

import locust  # noqa: F401, I001  (monkey-patches first, as in a real run)

import sys
import tempfile
import time
from pathlib import Path

import gevent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.canned_metrics import dcgm_text, vllm_text  # noqa: E402
from helpers.servers import canned_metrics_server  # noqa: E402

from capacity_plugins.telemetry.collector import TelemetryCollector  # noqa: E402
from capacity_plugins.telemetry.maps import SeriesTracker, normalize  # noqa: E402
from capacity_plugins.telemetry.scrape import ScrapeTarget, parse_exposition  # noqa: E402


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


def hub_stall() -> None:
    with canned_metrics_server() as server, tempfile.TemporaryDirectory() as tmp:
        url = server.url
        baseline = worst_gap(3.0)
        targets = [ScrapeTarget(url + p) for p in ("/vllm/metrics", "/dcgm/metrics", "/tgi/metrics")]
        c = TelemetryCollector(targets, interval_s=0.1, out_dir=Path(tmp))
        c.start()
        loaded = worst_gap(3.0)
        c.stop()
        print(f"worst 10 ms-ticker gap: {baseline * 1e3:.1f} ms alone, {loaded * 1e3:.1f} ms with a 3-target "
              f"10 Hz collector ({c.scrapes} scrapes) -> ratio {loaded / baseline:.2f}")


if __name__ == "__main__":
    parse_cost()
    hub_stall()
