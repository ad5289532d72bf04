"""Scraping real HTTP endpoints on loopback that serve canned vLLM/TGI/SGLang/Triton/DCGM text,
and normalising them with the known metric maps (units, label spellings, sentinels, deltas)."""

import pytest
from helpers.canned_metrics import GPU_MODEL, SGLANG_MODEL, VLLM_MODEL
from helpers.ports import free_port

from capacity_plugins.telemetry.maps import (
    MIB,
    Sample,
    SeriesTracker,
    guess_kind,
    keep_raw,
    normalize,
    provenance,
)
from capacity_plugins.telemetry.scrape import ScrapeTarget, parse_exposition


def _series_after_two_scrapes(url: str, kind: str | None = None) -> tuple[dict, ScrapeTarget, list[Sample]]:
    target = ScrapeTarget(url, kind)
    tracker = SeriesTracker()
    rows = []
    samples: list[Sample] = []
    for i in range(2):
        result = target.scrape(timeout_s=5)
        assert result.error is None, result.error
        samples = result.samples
        kind = kind or guess_kind(s.name for s in samples)
        assert kind is not None
        rows = tracker.rows(normalize(kind, samples, target.default_host), unix=100.0 + 2 * i)
    return {(r["host"], r["device"], r["series"]): r for r in rows}, target, samples


def test_vllm_gauges_histogram_deltas_and_rates(canned_url):
    series, target, samples = _series_after_two_scrapes(canned_url + "/vllm/metrics")
    host = target.default_host
    assert guess_kind(s.name for s in samples) == "vllm"
    key = (host, VLLM_MODEL, "server_running")
    assert series[key]["value"] == 20.0 and series[key]["unit"] == "requests"  # summed over engines
    assert series[(host, VLLM_MODEL, "server_waiting")]["value"] == 5.0
    # of which deferred (its adapter cannot join the batch), summed over engines; `capacity` not counted
    assert series[(host, VLLM_MODEL, "server_deferred")]["value"] == 2.0
    assert series[(host, VLLM_MODEL, "kv_cache_usage")]["value"] == pytest.approx(0.6)  # mean over engines
    assert series[(host, VLLM_MODEL, "server_ttft_s")]["value"] == pytest.approx(0.25)
    assert series[(host, VLLM_MODEL, "server_ttft_s")]["unit"] == "s"
    assert series[(host, VLLM_MODEL, "server_ttft_s_count")]["value"] == 2     # one per engine per scrape
    assert series[(host, VLLM_MODEL, "server_queue_s")]["value"] == pytest.approx(0.05)
    assert series[(host, VLLM_MODEL, "server_prefill_s")]["value"] == pytest.approx(0.1)
    # 2 engines x 40 tokens per scrape, 2 s apart
    assert series[(host, VLLM_MODEL, "server_output_tps")]["value"] == pytest.approx(40.0)
    # Δhits / Δqueries over both engines: (300 + 100) / 2000 — tokens, not a mean of the engines' rates
    assert series[(host, VLLM_MODEL, "prefix_cache_hit_rate")]["value"] == pytest.approx(0.2)
    assert series[(host, VLLM_MODEL, "prefix_cache_hit_rate")]["unit"] == "ratio"
    prov = provenance("vllm", samples)
    assert prov["served_models"] == [VLLM_MODEL]
    assert prov["info"]["vllm:cache_config_info"]["gpu_memory_utilization"] == "0.9"
    assert not keep_raw("vllm", "python_gc_objects_collected_total")
    assert keep_raw("vllm", "vllm:time_to_first_token_seconds_bucket")


def test_first_scrape_has_gauges_but_no_deltas(canned_url):
    target = ScrapeTarget(canned_url + "/vllm/metrics", "vllm")
    result = target.scrape(timeout_s=5)
    rows = SeriesTracker().rows(normalize("vllm", result.samples, target.default_host), unix=1.0)
    names = {r["series"] for r in rows}
    assert "server_running" in names and "server_ttft_s" not in names and "server_output_tps" not in names


def test_old_vllm_cache_gauge_is_the_fallback(canned_url):
    series, target, _ = _series_after_two_scrapes(canned_url + "/vllm-old/metrics")
    assert series[(target.default_host, VLLM_MODEL, "kv_cache_usage")]["value"] == pytest.approx(0.33)
    assert series[(target.default_host, VLLM_MODEL, "prefix_cache_hit_rate")]["value"] == pytest.approx(0.4)


@pytest.mark.parametrize("path", ["/dcgm/metrics", "/dcgm-new/metrics"])
def test_dcgm_units_both_host_label_spellings_and_sentinels(canned_url, path):
    series, _, samples = _series_after_two_scrapes(canned_url + path)
    assert guess_kind(s.name for s in samples) == "dcgm"
    gpu0, gpu1 = ("gpu-node-1", "0"), ("gpu-node-1", "1")      # host from the Hostname/hostname label
    assert series[(*gpu0, "vram_used_bytes")]["value"] == 61440 * MIB
    assert series[(*gpu0, "vram_used_bytes")]["unit"] == "bytes"
    assert series[(*gpu0, "vram_total_bytes")]["value"] == (61440 + 20000) * MIB
    assert series[(*gpu1, "gpu_util_pct")]["value"] == 91
    assert series[(*gpu0, "gpu_power_w")]["value"] == 512.25
    assert series[(*gpu1, "gpu_temp_c")]["value"] == 71
    assert series[(*gpu0, "sm_active")]["value"] == pytest.approx(0.62)
    assert (*gpu1, "sm_active") not in series                    # NOT_SUPPORTED sentinel dropped
    prov = provenance("dcgm", samples)
    assert prov["gpu_models"] == [GPU_MODEL] and prov["gpus"] == 2
    assert prov["driver_versions"] == ["550.54.15"]


def test_tgi(canned_url):
    series, target, _ = _series_after_two_scrapes(canned_url + "/tgi/metrics")
    host = target.default_host
    assert series[(host, "server", "server_waiting")]["value"] == 4
    assert series[(host, "server", "server_running")]["value"] == 16
    assert series[(host, "server", "server_queue_s")]["value"] == pytest.approx(0.1)
    assert series[(host, "server", "server_prefill_s")]["value"] == pytest.approx(0.05)  # decode excluded


def test_sglang(canned_url):
    series, target, _ = _series_after_two_scrapes(canned_url + "/sglang/metrics")
    host = target.default_host
    assert series[(host, SGLANG_MODEL, "server_running")]["value"] == 5
    assert series[(host, SGLANG_MODEL, "server_waiting")]["value"] == 1
    assert series[(host, SGLANG_MODEL, "kv_cache_usage")]["value"] == pytest.approx(0.42)
    assert series[(host, SGLANG_MODEL, "prefix_cache_hit_rate")]["value"] == pytest.approx(0.55)
    assert series[(host, SGLANG_MODEL, "server_ttft_s")]["value"] == pytest.approx(0.3)


def test_triton_counters_without_total_and_gpu_ratio(canned_url):
    series, target, samples = _series_after_two_scrapes(canned_url + "/triton/metrics")
    host, gpu = target.default_host, "GPU-a11ce000-0000-0000-0000-000000000000"
    assert guess_kind(s.name for s in samples) == "triton"
    assert series[(host, "ensemble", "server_waiting")]["value"] == 7
    assert series[(host, "ensemble", "server_queue_s")]["value"] == pytest.approx(0.002)  # µs -> s
    assert series[(host, gpu, "gpu_util_pct")]["value"] == pytest.approx(73.0)             # 0-1 -> %
    assert series[(host, gpu, "vram_total_bytes")]["value"] == 85899345920


def test_simulator_kind_maps_both_vllm_and_dcgm(canned_url):
    series, target, samples = _series_after_two_scrapes(canned_url + "/sim/metrics")
    assert guess_kind(s.name for s in samples) == "simulator"
    assert series[(target.default_host, VLLM_MODEL, "server_ttft_s")]["value"] == pytest.approx(0.25)
    assert series[("gpu-node-1", "0", "gpu_util_pct")]["value"] == 87


def test_counter_reset_gives_no_row_then_recovers():
    tracker = SeriesTracker()
    hist = "vllm:time_to_first_token_seconds"

    def snap(total, count):
        return normalize("vllm", [Sample(hist + "_sum", {"model_name": "m"}, total),
                                  Sample(hist + "_count", {"model_name": "m"}, count)], "h")

    tracker.rows(snap(100.0, 400), 1.0)
    assert tracker.rows(snap(1.0, 2), 2.0) == []                 # server restarted: negative delta
    mean, count = tracker.rows(snap(3.0, 6), 3.0)
    assert mean["value"] == pytest.approx(0.5) and count["value"] == 4 and count["series"] == "server_ttft_s_count"


@pytest.mark.parametrize("path,reason", [
    ("/garbage/metrics", "malformed"),
    ("/truncated/metrics", "malformed"),
    ("/error/metrics", "HTTP 500"),
    ("/nope/metrics", "HTTP 404"),
])
def test_bad_endpoints_are_errors_not_exceptions(canned_url, path, reason):
    result = ScrapeTarget(canned_url + path).scrape(timeout_s=5)
    assert result.error is not None and reason in result.error and result.samples == []


def test_unreachable_and_timeout(canned_url):
    down = ScrapeTarget(f"http://127.0.0.1:{free_port()}").scrape(timeout_s=2)
    assert down.error is not None and "unreachable" in down.error
    slow = ScrapeTarget(canned_url + "/slow/metrics").scrape(timeout_s=0.3)
    assert slow.error == "timeout"


def test_target_url_and_kind_validation():
    assert ScrapeTarget("127.0.0.1:8000").url == "http://127.0.0.1:8000/metrics"
    assert ScrapeTarget("http://h:9400/").url == "http://h:9400/metrics"
    assert ScrapeTarget("http://h:8002/custom").url == "http://h:8002/custom"
    with pytest.raises(ValueError, match="unknown kind"):
        ScrapeTarget("http://h:1", kind="vlm")
    with pytest.raises(ValueError, match="not an http"):
        ScrapeTarget("ftp://h/x")


def test_parse_exposition_rejects_html():
    with pytest.raises(ValueError):
        parse_exposition("<html>oops</html>\n")
    assert guess_kind(["process_cpu_seconds_total"]) is None


def test_credentials_in_url_are_sent_but_never_shown(canned_url):
    port = canned_url.rsplit(":", 1)[1]
    target = ScrapeTarget(f"http://scraper:s3cr%3At@127.0.0.1:{port}/auth/metrics")
    assert target.url == f"http://127.0.0.1:{port}/auth/metrics" and "s3cr" not in repr(target)
    assert target.default_host == f"127.0.0.1:{port}"
    result = target.scrape(timeout_s=5)
    assert result.error is None and any(s.name == "tgi_queue_size" for s in result.samples)
    denied = ScrapeTarget(f"http://scraper:wrong@127.0.0.1:{port}/auth/metrics").scrape(timeout_s=5)
    assert denied.error == "HTTP 401 Unauthorized"
