"""Server-side truth the metrics must carry exactly: the vLLM phase histograms agree with the truth log
request by request, and the prefix cache hits, counts and shortens prefill as vLLM's does."""

from __future__ import annotations

import statistics
import threading

import pytest
from helpers.simulator import metric, scrape

from capacity_plugins.simulator.rawclient import Connection, request
from capacity_plugins.simulator.truth import read_truth

PHASES = {  # histogram -> what each finished request's truth row says it observed
    "vllm:request_queue_time_seconds": lambda r: r["queue_s"],
    "vllm:request_prefill_time_seconds": lambda r: r["prefill_s"],
    "vllm:time_to_first_token_seconds": lambda r: r["queue_s"] + r["prefill_s"],
    "vllm:request_decode_time_seconds": lambda r: r["decode_s"],
    "vllm:request_inference_time_seconds": lambda r: r["prefill_s"] + r["decode_s"],
    "vllm:e2e_request_latency_seconds": lambda r: r["e2e_s"],
}


def ids(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


def test_phase_histogram_means_equal_the_truth_logs_means(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=3, decode_base_ms=4.0, decode_per_seq_ms=1.0,
                          prefill_tokens_per_s=20000.0)
    before = scrape(sim.port)
    sent: list[int] = []

    def client(k: int) -> None:
        with Connection(sim.port) as conn:
            for i in range(4):
                body = {"model": "sim-model", "prompt": ids(1000 * k, 50 + 40 * i), "max_tokens": 5 + 3 * k,
                        "stream": (i + k) % 2 == 0}
                sent.append(conn.request("POST", "/v1/completions", body).status)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = scrape(sim.port)
    rows = read_truth(truth, 24)
    assert sent == [200] * 24 and all(r["error_kind"] is None and r["e2e_s"] is not None for r in rows)
    assert statistics.mean(r["queue_s"] for r in rows) > 0.005  # 6 clients on 3 slots: some queued
    for name, of_row in PHASES.items():
        count = metric(after, name + "_count") - metric(before, name + "_count")
        total = metric(after, name + "_sum") - metric(before, name + "_sum")
        assert count == len(rows), name
        assert total / count == pytest.approx(statistics.mean(of_row(r) for r in rows), rel=1e-9, abs=1e-12), name
    # The two paths to the same quantity agree: queue + prefill + decode is the whole engine time.
    for r in rows:
        assert r["queue_s"] + r["prefill_s"] + r["decode_s"] == pytest.approx(r["e2e_s"], abs=1e-9)


def test_prefix_cache_shortens_prefill_for_repeats_and_shared_prefixes(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    rate = 5000.0
    sim = start_simulator(truth_log=truth, prefix_cache=True, prefill_tokens_per_s=rate, decode_base_ms=1.0,
                          decode_per_seq_ms=0.0)
    prompt = ids(1, 320)  # exactly 20 blocks of 16
    cases = [  # (prompt, cached tokens vLLM would find)
        (prompt, 0),
        (prompt, 304),  # an exact repeat: the last block is recomputed, (320 - 1) // 16 = 19 blocks hit
        (prompt[:200] + ids(5000, 100), 192),  # 200 shared tokens = 12 whole blocks
        (ids(9000, 300), 0),  # nothing shared
        (prompt[:200] + ids(5000, 100) + [7], 288),  # the 300-token prompt above, one token longer
    ]
    with Connection(sim.port) as conn:
        for p, _ in cases:
            assert conn.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 1}).status == 200
    rows = read_truth(truth, len(cases))
    assert [r["cached_tokens"] for r in rows] == [c for _, c in cases]
    for (p, cached), row in zip(cases, rows, strict=True):
        # The joining step is 1 ms of decode plus the uncached tokens' prefill: never less. Never as
        # much as charging the cached tokens too (or charging the prompt twice) either: each of
        # those adds more than half the whole prompt's prefill. (How close to the model a step
        # starts on this host, the wake-up slack: bench/bench_simulator.py.)
        expected = 0.001 + (len(p) - cached) / rate
        assert expected <= row["prefill_s"] < expected + 0.5 * len(p) / rate, (cached, row["prefill_s"])
    samples = scrape(sim.port)
    assert metric(samples, "vllm:prefix_cache_queries_total") == sum(len(p) for p, _ in cases)
    assert metric(samples, "vllm:prefix_cache_hits_total") == sum(c for _, c in cases)


def test_prefix_cache_off_by_default_and_counters_stay_zero(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth)
    for _ in range(2):
        request(sim.port, "POST", "/v1/completions", {"prompt": ids(1, 64), "max_tokens": 1})
    assert [r["cached_tokens"] for r in read_truth(truth, 2)] == [0, 0]
    samples = scrape(sim.port)
    assert metric(samples, "vllm:prefix_cache_queries_total") == metric(samples, "vllm:prefix_cache_hits_total") == 0


def test_preempted_requests_count_their_prompt_and_prefix_lookup_once(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, prefix_cache=True, max_model_len=128, kv_cache_tokens=200,
                          max_num_seqs=8, decode_base_ms=3.0, decode_per_seq_ms=0.0)
    shared = ids(1, 32)  # two blocks every request shares

    def client(k: int) -> None:
        request(sim.port, "POST", "/v1/completions",
                {"prompt": shared + ids(100 * (k + 1), 18), "max_tokens": 40, "ignore_eos": True, "stream": True})

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = read_truth(truth, 6)
    samples = scrape(sim.port)
    assert metric(samples, "vllm:num_preemptions_total") > 0  # 6 × (50 + 40) tokens > 200
    assert all(r["output_tokens"] == 40 for r in rows)
    # Re-admissions recompute (and look the cache up again) but, as in vLLM, the exported counters
    # and the prompt-token counter see each request once.
    assert metric(samples, "vllm:prompt_tokens_total") == sum(r["prompt_tokens"] for r in rows) == 6 * 50
    assert metric(samples, "vllm:prefix_cache_queries_total") == 6 * 50
    assert metric(samples, "vllm:prefix_cache_hits_total") == sum(r["cached_tokens"] for r in rows)
    assert sorted(r["cached_tokens"] for r in rows)[1:] == [32] * 5  # all but the first hit the shared blocks
