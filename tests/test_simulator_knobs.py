"""Engine knobs later analyses lean on, measured on a real simulator process: per-request service
jitter, the batch delay, streams without usage."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time

from helpers.simulator import metric, scrape

from capacity_plugins.simulator.engine import jitter_factors
from capacity_plugins.simulator.rawclient import Connection, request
from capacity_plugins.simulator.truth import read_truth

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}


def completion(prompt_tokens: int, max_tokens: int) -> dict:
    # A prompt of token ids counts exactly one token per id.
    return {"model": "sim-model", "prompt": [1] * prompt_tokens, "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True}


def test_service_jitter_scales_each_requests_prefill_and_decode_by_its_seeded_factor(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    # One slot: a request's join step is (12 + 4) ms × f plus 160 tokens / 10 000 per s × f, and
    # each later step (12 + 4) ms × f.
    sim = start_simulator(truth_log=truth, max_num_seqs=1, decode_base_ms=12.0, decode_per_seq_ms=4.0,
                          prefill_tokens_per_s=10000.0, service_jitter_cv=0.5, seed=3)
    n, out = 24, 6
    with Connection(sim.port) as conn:  # one client: requests are submitted in order
        for _ in range(n):
            assert conn.request("POST", "/v1/completions", completion(160, out)).status == 200
    rows = read_truth(truth, n)
    expected = list(itertools.islice(jitter_factors(0.5, 3), n))
    from_prefill = [r["prefill_s"] / (0.016 + 0.016) for r in rows]
    from_decode = [(r["token_times_s"][-1] - r["token_times_s"][0]) / ((out - 1) * 0.016) for r in rows]

    def rel(measured: list[float]) -> list[float]:
        return [abs(m / f - 1) for m, f in zip(measured, expected, strict=True)]

    # The same seeded factor drives each request's prefill and decode. Ignoring the factor, taking
    # another seed's or the next request's would put the median error at 0.45 or more and leave
    # at most 7 of 24 within 30 %; the host's wake-up lateness (against steps of 16 ms × f) stays
    # well inside these bounds. (How far inside, the simulator's precision: bench/bench_simulator.py.)
    assert statistics.median(rel(from_prefill)) < 0.15, (from_prefill, expected)
    assert statistics.median(rel(from_decode)) < 0.15, (from_decode, expected)
    assert sum(e < 0.3 for e in rel(from_decode)) >= 0.8 * n
    # Noisy service times: the factors really spread (a lognormal with CV 0.5, not a constant).
    assert max(expected) / min(expected) > 2 and max(from_decode) / min(from_decode) > 2


def test_batch_delay_holds_a_lone_request_until_it_expires(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=4, batch_delay_ms=200.0, decode_base_ms=5.0)
    assert request(sim.port, "POST", "/v1/chat/completions", {**CHAT, "max_tokens": 2}).status == 200
    (row,) = read_truth(truth, 1)
    # An idle engine sleeps out the delay, then starts: not before it, and not after a second one.
    # (How late after the delay it starts on this host: bench/bench_simulator.py.)
    assert 0.2 <= row["queue_s"] < 0.4


def test_batch_delay_ends_when_the_waiting_requests_fill_the_free_slots(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=4, batch_delay_ms=2000.0, decode_base_ms=5.0)
    threads = [threading.Thread(target=request, args=(sim.port, "POST", "/v1/chat/completions",
                                                      {**CHAT, "max_tokens": 2})) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = read_truth(truth, 4)
    # The fourth arrival fills all four slots: nobody waits for the 2 s delay.
    assert max(r["queue_s"] for r in rows) < 1.0


def test_batch_delay_on_a_busy_engine_admits_at_the_first_step_after_it(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=4, batch_delay_ms=150.0, decode_base_ms=10.0,
                          decode_per_seq_ms=0.0)
    long_runner = threading.Thread(target=request, args=(sim.port, "POST", "/v1/completions", completion(4, 60)))
    long_runner.start()
    deadline = time.monotonic() + 10
    while metric(scrape(sim.port), "vllm:num_requests_running") < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The engine now steps for the long request (1 of 4 slots); a short one arrives, cannot fill the
    # 3 free slots alone, so it waits out the 150 ms and joins at the next 10 ms step boundary: not
    # before the delay, nor after a second one or after the long request's 600 ms.
    short = request(sim.port, "POST", "/v1/completions", completion(4, 3))
    long_runner.join()
    rows = {r["id"]: r for r in read_truth(truth, 2)}
    row = rows.pop(short.headers["x-request-id"])
    assert 0.15 <= row["queue_s"] < 0.15 + 0.15
    (long_row,) = rows.values()
    assert long_row["output_tokens"] == 60 and long_row["queue_s"] >= 0.15


def test_no_usage_ignores_include_usage_in_streams(start_simulator):
    sim = start_simulator(no_usage=True)
    resp = request(sim.port, "POST", "/v1/chat/completions",
                   {**CHAT, "max_tokens": 4, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    payloads = resp.sse_events()
    assert payloads[-1] == b"[DONE]"
    events = [json.loads(p) for p in payloads[:-1]]
    assert len(events) == 1 + 4 and all("usage" not in e and e["choices"] for e in events)
    completions = request(sim.port, "POST", "/v1/completions",
                          {"prompt": "x", "max_tokens": 3, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
    assert b'"usage"' not in completions.body and completions.body.endswith(b"data: [DONE]\n\n")
    # A whole (non-streamed) response still reports usage, as llama.cpp's does.
    assert request(sim.port, "POST", "/v1/chat/completions",
                   {**CHAT, "max_tokens": 2, "ignore_eos": True}).json()["usage"]["completion_tokens"] == 2


def test_knob_flags_round_trip_and_reject_bad_values():
    from capacity_plugins.errors import UserError
    from capacity_plugins.simulator.cli import build_parser
    from capacity_plugins.simulator.config import SimConfig

    cfg = SimConfig(service_jitter_cv=0.3, batch_delay_ms=20.0, no_usage=True)
    # `--no-usage` must mean no_usage=True (argparse's own on/off action reads any `--no-` as off).
    assert cfg.to_argv() == ["--service-jitter-cv", "0.3", "--batch-delay-ms", "20.0", "--no-usage"]
    assert SimConfig.from_namespace(build_parser().parse_args(cfg.to_argv())) == cfg
    assert SimConfig.from_namespace(build_parser().parse_args(["--no-no-usage"])).no_usage is False
    assert SimConfig.from_mapping({"no_usage": True, "batch_delay_ms": 5}) == SimConfig(no_usage=True,
                                                                                         batch_delay_ms=5.0)
    for key, value in (("service_jitter_cv", -0.1), ("batch_delay_ms", -1), ("batch_delay_ms", float("nan"))):
        try:
            SimConfig.from_mapping({key: value})
        except UserError as e:
            assert str(e) == f"target.simulator.{key}: must be a finite non-negative number"
        else:
            raise AssertionError(f"{key}={value} accepted")
