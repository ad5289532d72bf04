"""Triton's generate extension (TensorRT-LLM / vLLM backend framing) and Triton-named /metrics, against a
real simulator process: streamed deltas or cumulative text, configurable field names, single-event
streams, Triton's error shape, health and metadata, and a `kind: triton` scrape that reads the truth."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time

import pytest
from helpers.simulator import metric, scrape

from capacity_plugins.simulator.rawclient import Connection, request
from capacity_plugins.simulator.truth import read_truth
from capacity_plugins.telemetry.maps import normalize
from capacity_plugins.telemetry.scrape import ScrapeTarget

STREAM = "/v2/models/sim-model/generate_stream"
GENERATE = "/v2/models/sim-model/generate"


def sse(resp) -> list[dict]:
    return [json.loads(p) for p in resp.sse_events()]


def test_generate_stream_sends_one_delta_event_per_token_like_triton(simulator):
    resp = request(simulator.port, "POST", STREAM,
                   {"text_input": "What is Triton?", "max_tokens": 6, "ignore_eos": True, "stream": True,
                    "id": "req-7"})
    assert resp.status == 200 and resp.complete
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["x-request-id"].startswith("triton-")
    # One `data: {…}\n\n` event per chunk, keys in the sorted order Triton's writer emits, no [DONE].
    for _, chunk in resp.chunks:
        assert chunk.startswith(b'data: {"id":"req-7","model_name":"sim-model","model_version":"1","text_output":')
        assert chunk.endswith(b"}\n\n") and chunk.count(b"data:") == 1
    events = sse(resp)
    assert len(events) == 6 and b"[DONE]" not in resp.body
    assert all(set(e) == {"id", "model_name", "model_version", "text_output"} for e in events)  # no usage
    assert all(len(e["text_output"].split()) == 1 for e in events)
    whole = request(simulator.port, "POST", GENERATE, {"text_input": "x", "max_tokens": 6, "ignore_eos": True})
    assert whole.headers["content-type"] == "application/json"
    assert whole.json() == {"model_name": "sim-model", "model_version": "1",
                            "text_output": "".join(e["text_output"] for e in events)}


def test_max_tokens_as_an_input_tensor_or_a_request_parameter(simulator):
    trtllm = request(simulator.port, "POST", GENERATE,
                     {"text_input": ["hello"], "max_tokens": [5], "ignore_eos": [True]}).json()
    vllm = request(simulator.port, "POST", GENERATE,
                   {"text_input": "hello", "parameters": {"max_tokens": 5, "ignore_eos": True, "temperature": 0}})
    assert len(trtllm["text_output"].split()) == len(vllm.json()["text_output"].split()) == 5
    drawn = [len(request(simulator.port, "POST", GENERATE, {"text_input": "hi", "max_tokens": 12, "min_tokens": 9})
                 .json()["text_output"].split()) for _ in range(8)]
    assert all(9 <= n <= 12 for n in drawn)


def test_generate_stream_without_stream_flag_is_one_event_at_the_end(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, decode_base_ms=5.0, reasoning_tokens=2)
    resp = request(sim.port, "POST", STREAM, {"text_input": "x", "max_tokens": 8, "ignore_eos": True})
    assert resp.status == 200 and len(resp.chunks) == 1
    (event,) = sse(resp)
    assert len(event["text_output"].split()) == 8  # reasoning tokens are plain text: no split event
    row = read_truth(truth, 1)[0]
    assert row["dialect"] == "triton" and row["tokens_per_write"] == [8] and row["stream"] is True
    # The single event leaves when the last token is generated: 8 steps of ≥ 5 ms after arrival.
    assert row["first_token_s"] == row["token_times_s"][-1] >= 8 * 0.005


def test_cumulative_outputs_and_configured_field_names(start_simulator):
    sim = start_simulator(triton_cumulative=True, triton_input_field="prompt",
                          triton_max_tokens_field="max_new_tokens", triton_output_field="generated_text",
                          tokens_per_write=2)
    resp = request(sim.port, "POST", STREAM,
                   {"prompt": "hi", "parameters": {"max_new_tokens": 5, "stream": True}, "ignore_eos": True})
    texts = [e["generated_text"] for e in sse(resp)]
    assert [len(t.split()) for t in texts] == [2, 4, 5]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    whole = request(sim.port, "POST", GENERATE, {"prompt": "hi", "max_new_tokens": 5, "ignore_eos": True}).json()
    assert set(whole) == {"model_name", "model_version", "generated_text"}
    # The default name is now just another key: Triton would reject the missing input.
    missing = request(sim.port, "POST", GENERATE, {"text_input": "hi"})
    assert missing.status == 400 and "missing required input(s) ['prompt']" in missing.json()["error"]
    meta = request(sim.port, "GET", "/v2/models/sim-model").json()
    assert [i["name"] for i in meta["inputs"]][:2] == ["prompt", "max_new_tokens"]
    assert meta["outputs"] == [{"name": "generated_text", "datatype": "BYTES", "shape": [-1]}]


@pytest.mark.parametrize(("path", "body", "status", "fragment"), [
    ("/v2/models/other/generate", {"text_input": "x"}, 404, "Request for unknown model: 'other' is not found"),
    ("/v2/models/sim-model/versions/3/generate", {"text_input": "x"}, 404, "version 3 is not found"),
    (GENERATE, {"max_tokens": 3}, 400, "missing required input(s) ['text_input']"),
    (GENERATE, {"text_input": 5}, 400, "input 'text_input' must be a string"),
    (GENERATE, {"text_input": "x", "max_tokens": 0}, 400, "'max_tokens' must be an integer >= 1"),
    (GENERATE, {"text_input": "x", "parameters": "hot"}, 400, "Expected JSON object for keyword: 'parameters'"),
    (GENERATE, {"text_input": "x", "stream": True}, 400, "generate expects model to produce exactly 1 response"),
    (GENERATE, {"text_input": "x", "max_tokens": 5000}, 400, "exceeds the maximum sequence length (4096)"),
])
def test_errors_are_triton_error_objects(simulator, path, body, status, fragment):
    resp = request(simulator.port, "POST", path, body)
    assert resp.status == status and set(resp.json()) == {"error"}
    assert fragment in resp.json()["error"]


def test_health_metadata_and_method_checks(simulator):
    with Connection(simulator.port) as conn:
        for path in ("/v2/health/ready", "/v2/health/live", "/v2/models/sim-model/ready",
                     "/v2/models/sim-model/versions/1/ready"):
            resp = conn.request("GET", path)
            assert resp.status == 200 and resp.body == b"", path
        meta = conn.request("GET", "/v2/models/sim-model").json()
        assert meta["name"] == "sim-model" and meta["versions"] == ["1"]
        assert meta["inputs"][0] == {"name": "text_input", "datatype": "BYTES", "shape": [-1]}
        assert "generate" in conn.request("GET", "/v2").json()["extensions"]
        assert conn.request("GET", GENERATE).status == 405
        assert conn.request("GET", "/v2/models/other").status == 404
        assert conn.request("GET", "/v2/models/sim-model/infer").status == 404


def test_in_stream_error_and_overload_use_the_triton_shape(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, stream_error_prob=1.0)
    resp = request(sim.port, "POST", STREAM, {"text_input": "x", "max_tokens": 10, "stream": True})
    assert resp.status == 200 and resp.complete
    *tokens, last = sse(resp)
    assert last == {"error": "simulated engine failure"} and all("text_output" in t for t in tokens)
    assert read_truth(truth, 1)[0]["error_kind"] == "server_error"
    busy = start_simulator(error_rate=1.0)
    resp = request(busy.port, "POST", GENERATE, {"text_input": "x"})
    assert resp.status in (500, 503) and set(resp.json()) == {"error"}


def _scrape_triton(sim):
    target = ScrapeTarget(sim.url, kind="triton")
    result = target.scrape(5.0)
    assert result.error is None, result.error
    return normalize("triton", result.samples, target.default_host), target.default_host


def test_triton_kind_scrape_finds_every_series_and_the_means_match_the_truth_log(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=2, decode_base_ms=10.0, decode_per_seq_ms=0.0)
    done: list[int] = []

    def client() -> None:
        with Connection(sim.port) as conn:
            for _ in range(3):
                resp = conn.request("POST", STREAM, {"text_input": "count", "max_tokens": 15, "ignore_eos": True,
                                                     "stream": True})
                done.append(resp.status)

    threads = [threading.Thread(target=client) for _ in range(5)]
    for t in threads:
        t.start()
    snap_busy, host = None, ""
    while any(t.is_alive() for t in threads):
        snap, host = _scrape_triton(sim)
        # Busy: some run, some wait (right after the arrivals the first step may not have started).
        if snap.gauges.get((host, "sim-model", "server_waiting"), 0) > 0 < snap.gauges.get(
                (host, "sim-model", "server_running"), 0):
            snap_busy = snap
            break
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert done == [200] * 15
    assert snap_busy is not None, "never saw a waiting request with 5 clients on 2 slots"
    busy = snap_busy.gauges
    assert busy[(host, "sim-model", "server_running")] <= 2
    assert busy[(host, "sim-model", "server_running")] + busy[(host, "sim-model", "server_waiting")] <= 5
    assert 0 < busy[(host, "sim-model", "kv_cache_usage")] <= 1
    snap, host = _scrape_triton(sim)
    rows = read_truth(truth, 15)
    # Triton's cumulative queue µs over successes / (successes + failures) is the truth's mean queue
    # time (each request's µs rounded to a whole number, as Triton counts them).
    queue_us, requests = snap.ratios[(host, "sim-model", "server_queue_s")]
    assert requests == 15
    assert queue_us / requests == pytest.approx(statistics.mean(r["queue_s"] for r in rows), abs=1e-6)
    ttft_sum, ttft_count = snap.hists[(host, "sim-model", "server_ttft_s")]
    assert ttft_count == 15
    assert ttft_sum / ttft_count == pytest.approx(statistics.mean(r["queue_s"] + r["prefill_s"] for r in rows),
                                                  rel=1e-9)
    assert statistics.mean(r["queue_s"] for r in rows) > 0.05  # 5 clients on 2 slots did queue
    gpu = "GPU-00000000-0000-0000-0000-5133554c4154"
    assert snap.gauges[(host, gpu, "vram_total_bytes")] == 24576 * 2**20
    assert snap.gauges[(host, gpu, "gpu_power_limit_w")] == 300
    assert 0 < snap.gauges[(host, gpu, "gpu_util_pct")] <= 100
    assert snap.gauges[(host, "sim-model", "server_running")] == 0


def test_triton_failures_are_counted_by_reason(start_simulator):
    def failures(sim) -> dict[str, float]:
        samples = scrape(sim.port)
        return {reason: metric(samples, "nv_inference_request_failure_total", model="sim-model", reason=reason,
                               version="1")
                for reason in ("BACKEND", "CANCELED", "REJECTED", "OTHER")}

    faulty = start_simulator(error_rate=1.0)
    for _ in range(3):
        request(faulty.port, "POST", GENERATE, {"text_input": "x"})
    assert failures(faulty) == {"BACKEND": 3, "CANCELED": 0, "REJECTED": 0, "OTHER": 0}
    assert metric(scrape(faulty.port), "nv_inference_request_success_total", model="sim-model", version="1") == 0

    slow = start_simulator(max_num_seqs=1, queue_limit_429=1, decode_base_ms=20.0)
    s = socket.create_connection(("127.0.0.1", slow.port))
    body = json.dumps({"text_input": "x", "max_tokens": 200, "stream": True}).encode()
    s.sendall(b"POST %b HTTP/1.1\r\ncontent-length: %d\r\n\r\n%b" % (STREAM.encode(), len(body), body))
    s.recv(4096)  # streaming: it holds the only slot
    waiter = threading.Thread(target=request, args=(slow.port, "POST", GENERATE, {"text_input": "y", "max_tokens": 2}))
    waiter.start()
    deadline = time.monotonic() + 10
    while metric(scrape(slow.port), "vllm:num_requests_waiting") < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    rejected = request(slow.port, "POST", GENERATE, {"text_input": "z"})  # the queue (limit 1) is full
    assert rejected.status == 429 and set(rejected.json()) == {"error"}
    s.close()  # the running request's client goes away: its slot frees, the waiter runs
    waiter.join()
    assert failures(slow) == {"BACKEND": 0, "CANCELED": 1, "REJECTED": 1, "OTHER": 0}


def test_triton_field_settings_are_checked():
    from capacity_plugins.errors import UserError
    from capacity_plugins.simulator.config import SimConfig

    with pytest.raises(UserError, match=r"^target\.simulator\.triton_output_field: 'model_name' is a key Triton"):
        SimConfig.from_mapping({"triton_output_field": "model_name"})
    with pytest.raises(UserError, match=r"^target\.simulator\.triton_max_tokens_field: must differ from "
                                        r"triton_input_field"):
        SimConfig.from_mapping({"triton_input_field": "n", "triton_max_tokens_field": "n"})
    with pytest.raises(UserError, match=r"^target\.simulator\.triton_input_field: must be a JSON key"):
        SimConfig.from_mapping({"triton_input_field": "text input"})
    cfg = SimConfig.from_mapping({"triton_cumulative": True, "triton_output_field": "generated_text"})
    assert cfg.to_argv() == ["--triton-output-field", "generated_text", "--triton-cumulative"]


def test_single_event_streams_under_faults(start_simulator, tmp_path):
    # Without `stream`, nothing is written before the end: a cut leaves no event, a stall delays
    # the one event, an in-stream error replaces it.
    truth = tmp_path / "cut.jsonl"
    cut = start_simulator(truth_log=truth, disconnect_prob=1.0)
    resp = request(cut.port, "POST", STREAM, {"text_input": "x", "max_tokens": 10})
    assert resp.status == 200 and not resp.complete and resp.body == b""
    assert read_truth(truth, 1)[0]["error_kind"] == "stream_cut"
    stalled = start_simulator(stall_prob=1.0, stall_s=0.2, decode_base_ms=1.0)
    resp = request(stalled.port, "POST", STREAM, {"text_input": "x", "max_tokens": 10, "ignore_eos": True})
    assert resp.complete and len(resp.chunks) == 1 and len(sse(resp)[0]["text_output"].split()) == 10
    assert resp.chunks[0][0] - resp.sent >= 0.19
    failing = start_simulator(stream_error_prob=1.0)
    resp = request(failing.port, "POST", STREAM, {"text_input": "x", "max_tokens": 10})
    assert resp.complete and sse(resp) == [{"error": "simulated engine failure"}]
