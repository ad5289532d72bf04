"""ClientSampler: real psutil readings of this process, taken in a native thread."""

import os
import time

import pytest

from capacity_plugins.telemetry.client import ClientSampler


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


@pytest.mark.alone
def test_samples_cpu_and_rss_and_windows():
    sampler = ClientSampler(interval_s=0.2, device="worker-3")
    t0 = time.time()
    sampler.start()
    try:
        time.sleep(0.5)          # idle phase
        t_busy = time.time()
        _burn(0.9)               # one core busy
        t_busy_end = time.time()
        time.sleep(0.3)
    finally:
        sampler.stop()
    samples = sampler.samples_since(t0)
    assert len(samples) >= 5
    assert all(s["rss_bytes"] > 10 * 2**20 for s in samples)
    busy = sampler.max_cpu_pct(t_busy + 0.25, t_busy_end)
    # The sampler reports a CPU share for a busy process. (How much of a core a spinning loop
    # reads, which a loaded machine decides: bench/bench_telemetry.py.)
    assert busy is not None and busy > 0
    # ... in the window it was busy: the idle phase before it reads less
    idle = sampler.max_cpu_pct(t0 + 0.25, t_busy)
    assert idle is not None and idle < busy
    assert sampler.max_cpu_pct(t0 - 100, t0 - 50) is None
    assert sampler.latest() == samples[-1]
    rows = sampler.series_rows(samples[:1], step_of=lambda t: 7)
    by_series = {r["series"]: r for r in rows}
    assert by_series["client_cpu_pct"]["device"] == "worker-3"
    assert by_series["client_cpu_pct"]["step"] == 7
    assert by_series["client_rss_bytes"]["unit"] == "bytes"


def test_idle_process_reads_a_cpu_share_per_sample():
    # (How low an idle process reads: bench/bench_telemetry.py.)
    sampler = ClientSampler(interval_s=0.2)
    started = time.time()
    sampler.start()
    time.sleep(0.9)
    sampler.stop()
    samples = sampler.samples_since(0)
    cpu = [s["cpu_pct"] for s in samples]
    assert cpu and all(isinstance(v, float) and 0 <= v <= 100 * (os.cpu_count() or 1) for v in cpu), cpu
    # every share covers a whole interval: CPU time comes in 10 ms clock ticks, so a share over a
    # millisecond (a first sample right after its baseline) can read one tick as 1917 %
    assert samples[0]["unix"] - started >= 0.15, samples[0]["unix"] - started
    assert sampler.device == "local"


def test_bad_interval_is_rejected():
    with pytest.raises(ValueError):
        ClientSampler(interval_s=0)
