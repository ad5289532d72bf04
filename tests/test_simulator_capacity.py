"""The engine behaves like a continuous-batching server: knee at max_num_seqs, queueing, prefill,
KV budget, prefix cache; the truth log agrees with a loopback client; /metrics moves with load."""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

import pytest
from helpers.simulator import metric, scrape

from capacity_plugins.simulator.rawclient import Connection, Response, request
from capacity_plugins.simulator.truth import read_truth

CONTENT = b'"delta":{"content":'


def stream_body(max_tokens: int, content: str = "Tell me a story.") -> dict:
    return {"model": "sim-model", "messages": [{"role": "user", "content": content}], "stream": True,
            "ignore_eos": True, "max_tokens": max_tokens}


def truth_rows(path: Path, n: int = 0) -> list[dict]:
    return read_truth(path, n)


def run_clients(port: int, n: int, body: dict, until: float | None = None, repeat: int = 1) -> list[Response]:
    """n concurrent clients, each sending `body` in a closed loop (until a time or `repeat` times)."""
    results: list[Response] = []
    lock = threading.Lock()

    def client() -> None:
        with Connection(port) as conn:
            done = 0
            while (until is not None and time.perf_counter() < until) or (until is None and done < repeat):
                resp = conn.request("POST", "/v1/chat/completions", body)
                with lock:
                    results.append(resp)
                done += 1

    threads = [threading.Thread(target=client) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# measured: throughput in 1-s windows of 4-ms decode steps; beside the CPU-bound parallel phase the
# 8-client window once read 292 tokens/s against the 4-client window's 413
@pytest.mark.measured
def test_throughput_grows_until_max_num_seqs_then_flattens_while_queue_grows(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=4, decode_base_ms=4.0, decode_per_seq_ms=1.0)
    rates, queues = {}, {}
    seen = 0
    for n in (1, 2, 4, 8):
        start = time.perf_counter()
        window = (start + 0.25, start + 1.25)
        resps = run_clients(sim.port, n, stream_body(16), until=window[1])
        tokens = sum(chunk.count(CONTENT) for r in resps for t, chunk in r.chunks if window[0] <= t < window[1])
        rates[n] = tokens / (window[1] - window[0])
        rows = truth_rows(truth, seen + len(resps))
        queues[n] = statistics.mean(row["queue_s"] for row in rows[seen:])
        seen = len(rows)
    # Expected: 200, 333, 500, 500 tokens/s (step = 4 ms + 1 ms × running, 4 slots).
    assert rates[2] / rates[1] > 1.3, rates
    assert rates[4] / rates[2] > 1.2, rates
    assert 0.85 < rates[8] / rates[4] < 1.15, rates
    # Below the knee a request joins at the next step (8 ms) instead of waiting for a free slot (a
    # whole request: 16 tokens of 8 ms); past it, it waits for a slot.
    assert queues[4] < 0.5 * 16 * 0.008, queues
    assert queues[8] > 0.05 and queues[8] > 4 * queues[4], queues


# measured: the client stamps `sent` after its write returns; beside the parallel phase under
# coverage that stamp came 2.5 ms late, past the 2-ms allowance
@pytest.mark.measured
def test_ttft_is_queue_plus_prefill(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=1, prefill_tokens_per_s=2000.0, decode_base_ms=2.0,
                          decode_per_seq_ms=0.0)
    prompt = "abcd " * 80  # 100 tokens + 6 chat-template tokens → 53 ms of prefill
    resps = run_clients(sim.port, 3, stream_body(10, prompt))
    rows = sorted(truth_rows(truth, 3), key=lambda r: r["queue_s"])
    assert len(rows) == 3 and all(r["prompt_tokens"] == 106 for r in rows)
    for row in rows:
        assert row["prefill_s"] >= 0.053
        # The gap is one synchronous callback (µs) unless the OS deschedules us on a busy box;
        # what this guards is that TTFT contains the 53+ ms of prefill and the queue wait.
        assert abs(row["first_token_s"] - (row["queue_s"] + row["prefill_s"])) < 0.02
    # One slot: the third waits for two whole requests (each ≥ 53 ms prefill + 9 × 2 ms decode).
    assert rows[2]["queue_s"] > 2 * 0.07
    by_id = {r["id"]: r for r in rows}
    for resp in resps:
        row = by_id[resp.headers["x-request-id"]]
        first = next(t for t, c in resp.chunks if CONTENT in c)
        assert first - resp.sent >= row["queue_s"] + row["prefill_s"] - 0.002


# measured: the bounds are on this process's own read of each write, which lags 20 ms and more
# when the parallel phase keeps both cores busy (one failed so with 1138 other tests beside it)
@pytest.mark.measured
def test_truth_log_matches_what_a_loopback_client_sees(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth)
    seen: list[tuple[str, float, list[float]]] = []
    with Connection(sim.port) as conn:
        for _ in range(10):
            resp = conn.request("POST", "/v1/chat/completions", stream_body(8))
            times = [t - resp.sent for t, c in resp.chunks if CONTENT in c]
            rid = json.loads(resp.sse_events()[0])["id"]
            seen.append((rid, times[0], times))
    rows = {r["id"]: r for r in truth_rows(truth, 10)}
    ttft_diffs, token_diffs = [], []
    for rid, ttft, times in seen:
        row = rows[rid]
        assert row["dialect"] == "openai" and row["status"] == 200 and row["error_kind"] is None
        assert row["output_tokens"] == len(times) == 8 and row["tokens_per_write"] == [1] * 8
        ttft_diffs.append(abs(ttft - row["first_token_s"]))
        token_diffs += [abs(a - b) for a, b in zip(times, row["token_times_s"], strict=True)]
    # Loopback: the gap is the kernel hop plus parsing, well under a millisecond when idle;
    # the bounds leave room for a loaded 2-core CI box but catch a stamp taken at the wrong event
    # (e.g. at step start or at header time, which would be ≥ one 9 ms step off).
    assert statistics.median(ttft_diffs) < 0.003, ttft_diffs
    assert statistics.median(token_diffs) < 0.003, token_diffs
    assert sorted(token_diffs)[int(0.9 * len(token_diffs))] < 0.008, token_diffs


def test_metrics_parse_and_move_with_load(start_simulator):
    sim = start_simulator(max_num_seqs=2, decode_base_ms=10.0, decode_per_seq_ms=0.0)
    before = scrape(sim.port)
    assert metric(before, "vllm:num_requests_running") == 0
    assert metric(before, "DCGM_FI_DEV_GPU_UTIL", simulated="true", modelName="SIMULATED-GPU") == 0
    assert metric(before, "vllm:cache_config_info", max_num_seqs="2") == 1
    worker = threading.Thread(target=run_clients, args=(sim.port, 6, stream_body(60)))
    worker.start()
    time.sleep(0.4)
    during = scrape(sim.port)
    worker.join()
    after = scrape(sim.port)
    assert metric(during, "vllm:num_requests_running") == 2
    assert metric(during, "vllm:num_requests_waiting") == 4
    assert 0 < metric(during, "vllm:kv_cache_usage_perc") <= 1
    assert metric(during, "DCGM_FI_DEV_GPU_UTIL", gpu="0") > 10
    assert metric(during, "DCGM_FI_DEV_POWER_USAGE", gpu="0") > metric(before, "DCGM_FI_DEV_POWER_USAGE", gpu="0")
    assert metric(during, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") > 0
    assert metric(during, "DCGM_FI_DEV_FB_USED", gpu="0") + metric(during, "DCGM_FI_DEV_FB_FREE", gpu="0") == 24576

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("vllm:generation_tokens_total") == 6 * 60
    assert delta("vllm:prompt_tokens_total") == 6 * 10  # 4 content tokens + 6 template tokens
    assert delta("vllm:request_success_total", finished_reason="length") == 6
    assert delta("vllm:time_to_first_token_seconds_count") == 6
    assert delta("vllm:e2e_request_latency_seconds_count") == 6
    assert delta("vllm:inter_token_latency_seconds_count") == 6 * 59
    assert delta("vllm:request_generation_tokens_sum") == 6 * 60
    assert delta("vllm:request_queue_time_seconds_sum") > 4 * 0.5  # four of them waited ≥ 1 request
    assert metric(after, "vllm:num_requests_running") == 0 and metric(after, "vllm:kv_cache_usage_perc") == 0


def test_prefix_cache_hits_make_prefill_faster(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, prefix_cache=True, prefill_tokens_per_s=5000.0)
    prompt = "The same long system prompt, repeated. " * 50  # ≈ 500 tokens
    for _ in range(2):
        request(sim.port, "POST", "/v1/chat/completions", stream_body(2, prompt))
    first, second = truth_rows(truth, 2)
    assert first["prefill_s"] > 0.09 and second["prefill_s"] < first["prefill_s"] / 3
    samples = scrape(sim.port)
    queries = metric(samples, "vllm:prefix_cache_queries_total")
    hits = metric(samples, "vllm:prefix_cache_hits_total")
    assert queries == first["prompt_tokens"] + second["prompt_tokens"]
    assert first["prompt_tokens"] * 0.8 < hits < first["prompt_tokens"]


def test_kv_budget_limits_the_batch_and_preempted_requests_still_finish(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_model_len=128, kv_cache_tokens=200, max_num_seqs=8,
                          decode_base_ms=5.0, decode_per_seq_ms=0.0)
    prompt = "abcd" * 44  # 44 + 6 = 50 prompt tokens; 3 fit at first, then growth forces preemption
    worker = threading.Thread(target=run_clients, args=(sim.port, 6, stream_body(40, prompt)))
    worker.start()
    time.sleep(0.15)
    during = scrape(sim.port)
    worker.join()
    assert metric(during, "vllm:num_requests_running") <= 3
    assert metric(during, "vllm:kv_cache_usage_perc") <= 1.0
    assert metric(scrape(sim.port), "vllm:num_preemptions_total") > 0
    rows = truth_rows(truth, 6)
    assert len(rows) == 6 and all(r["output_tokens"] == 40 and r["status"] == 200 for r in rows)


def test_seed_makes_output_lengths_reproducible(start_simulator):
    def lengths(sim) -> list[int]:
        body = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 30}
        with Connection(sim.port) as conn:
            return [conn.request("POST", "/v1/chat/completions", body).json()["usage"]["completion_tokens"]
                    for _ in range(5)]

    a, b, c = (start_simulator(seed=s, decode_base_ms=0.5, decode_per_seq_ms=0.0) for s in (7, 7, 8))
    assert lengths(a) == lengths(b) != lengths(c)
