"""Each fault knob produces its failure; bad bodies get the dialect's 4xx JSON; bad flags and bad
`target.simulator` settings get one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.processes import CAPACITY, capacity, popen
from helpers.simulator import metric, scrape

from capacity_plugins.errors import UserError
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.rawclient import request
from capacity_plugins.simulator.truth import read_truth


def chat_body(max_tokens: int = 8, stream: bool = True, **extra: object) -> dict:
    return {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": stream,
            "ignore_eos": True, "max_tokens": max_tokens, **extra}


def truth_rows(path: Path, n: int = 1) -> list[dict]:
    return read_truth(path, n)


def assert_vllm_error(resp, status: int) -> dict:
    assert resp.status == status
    body = resp.json()
    assert body["object"] == "error" and body["code"] == status and body["message"]
    assert set(body) == {"object", "message", "type", "param", "code"}
    return body


# -- faults ------------------------------------------------------------------------------------
def test_error_rate_answers_500_or_503(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, error_rate=1.0)
    statuses = set()
    for _ in range(8):
        resp = request(sim.port, "POST", "/v1/chat/completions", chat_body())
        assert_vllm_error(resp, resp.status)
        statuses.add(resp.status)
    assert statuses <= {500, 503} and statuses
    assert {r["error_kind"] for r in truth_rows(truth, 8)} == {"http_5xx"}


def test_queue_limit_gives_429_when_the_queue_is_full(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=1, queue_limit_429=1, decode_base_ms=10.0)
    results = []

    def send() -> None:
        results.append(request(sim.port, "POST", "/v1/chat/completions", chat_body(20)))

    first = threading.Thread(target=send)
    first.start()
    time.sleep(0.1)  # the first is running (20 tokens × 10 ms): the queue is empty again
    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in [first, *threads]:
        t.join()
    statuses = sorted(r.status for r in results)
    # One runs, one waits, the other three find the queue full.
    assert statuses == [200, 200, 429, 429, 429]
    assert_vllm_error(next(r for r in results if r.status == 429), 429)
    assert sorted(str(r["error_kind"]) for r in truth_rows(truth, 5)) == ["None", "None"] + ["http_429"] * 3


def test_disconnect_cuts_the_stream(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, disconnect_prob=1.0)
    resp = request(sim.port, "POST", "/v1/chat/completions", chat_body(20))
    assert resp.status == 200 and not resp.complete
    assert b"[DONE]" not in resp.body
    row = truth_rows(truth)[0]
    assert row["error_kind"] == "stream_cut" and row["output_tokens"] < 20
    # The server survives and the aborted request left the batch, its KV tokens freed.
    assert request(sim.port, "GET", "/health").status == 200
    after = scrape(sim.port)
    assert metric(after, "vllm:num_requests_running") == 0 and metric(after, "vllm:kv_cache_usage_perc") == 0


def test_stall_holds_the_stream(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, stall_prob=1.0, stall_s=0.3, decode_base_ms=2.0)
    resp = request(sim.port, "POST", "/v1/chat/completions", chat_body(10))
    assert resp.complete
    times = [t for t, _ in resp.chunks]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) >= 0.28
    row = truth_rows(truth)[0]
    assert row["error_kind"] is None and row["output_tokens"] == 10
    assert max(row["tokens_per_write"]) > 1  # tokens generated during the stall arrive together


def test_malformed_chunk_is_not_json(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, malformed_prob=1.0)
    resp = request(sim.port, "POST", "/v1/chat/completions", chat_body(10))
    bad = 0
    for payload in resp.sse_events():
        if payload != b"[DONE]":
            try:
                json.loads(payload)
            except json.JSONDecodeError:
                bad += 1
    assert bad == 1 and resp.complete
    assert truth_rows(truth)[0]["error_kind"] == "malformed"


def test_stream_error_event_then_done(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, stream_error_prob=1.0)
    resp = request(sim.port, "POST", "/v1/chat/completions", chat_body(10))
    events = resp.sse_events()
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == 500 and error["object"] == "error"
    assert all("error" not in json.loads(e) for e in events[:-2])
    row = truth_rows(truth)[0]
    assert row["error_kind"] == "server_error" and row["output_tokens"] < 10
    # Same fault in the Ollama dialect: an {"error"} line ends the NDJSON stream.
    resp = request(sim.port, "POST", "/api/chat", {"model": "sim-model", "messages": [{"role": "user", "content": "x"}],
                                                  "options": {"num_predict": 10}})
    assert "error" in json.loads(resp.body.splitlines()[-1])


def test_client_disconnect_frees_the_slot(start_simulator, tmp_path):
    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=1, decode_base_ms=5.0)
    import socket

    s = socket.create_connection(("127.0.0.1", sim.port))
    body = json.dumps(chat_body(500)).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
    s.recv(4096)
    s.close()
    # The only slot is free again: the next request runs at once, not after 500 tokens (2.5 s).
    resp = request(sim.port, "POST", "/v1/chat/completions", chat_body(3))
    assert resp.complete
    rows = truth_rows(truth, 2)
    assert rows[0]["error_kind"] == "cancelled" and rows[0]["generated_tokens"] < 500
    assert rows[1]["queue_s"] < 0.5


# -- bad request bodies ---------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'{"messages": "hi"}', b'{"messages": []}',
                                 b'{"messages": [{"content": "no role"}]}'])
def test_bad_chat_bodies_get_vllm_400(simulator, raw):
    resp = request(simulator.port, "POST", "/v1/chat/completions", raw=raw)
    assert_vllm_error(resp, 400)


@pytest.mark.parametrize("extra", [{"max_tokens": "ten"}, {"max_tokens": 0}, {"temperature": "hot"},
                                   {"stream": "yes"}, {"n": 2}, {"stream": False, "stream_options": {}}])
def test_bad_chat_fields_get_vllm_400(simulator, extra):
    body = {**chat_body(), **extra}
    message = assert_vllm_error(request(simulator.port, "POST", "/v1/chat/completions", body), 400)["message"]
    assert message


def test_too_long_requests_get_vllms_context_length_error(start_simulator):
    sim = start_simulator(max_model_len=100, kv_cache_tokens=100)
    long = {"model": "sim-model", "messages": [{"role": "user", "content": "word " * 200}]}
    msg = assert_vllm_error(request(sim.port, "POST", "/v1/chat/completions", long), 400)["message"]
    assert "maximum context length is 100 tokens" in msg
    over = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 99}
    msg = assert_vllm_error(request(sim.port, "POST", "/v1/chat/completions", over), 400)["message"]
    assert "maximum context length is 100 tokens" in msg and "99 in the completion" in msg
    tgi = request(sim.port, "POST", "/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 100}})
    assert tgi.status == 422 and tgi.json()["error_type"] == "validation"


def test_unknown_model_and_other_dialects_errors(simulator):
    resp = request(simulator.port, "POST", "/v1/chat/completions", {**chat_body(), "model": "gpt-9"})
    assert "does not exist" in assert_vllm_error(resp, 404)["message"]
    tgi = request(simulator.port, "POST", "/generate", {"parameters": {}})
    assert tgi.status == 422 and set(tgi.json()) == {"error", "error_type"}
    assert request(simulator.port, "POST", "/generate", raw=b"{oops").status == 400
    ollama = request(simulator.port, "POST", "/api/chat", {"messages": [{"role": "user", "content": "x"}]})
    assert ollama.status == 400 and ollama.json() == {"error": "model is required"}
    assert request(simulator.port, "GET", "/v1/chat/completions").status == 405


# -- flags and config ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--max-num-seqs", "many"], ["--max-num-seqs", "0"], ["--bogus"],
                                  ["--error-rate", "1.5"], ["--port", "70000"]])
def test_bad_flags_exit_2_with_one_line(argv):
    proc = capacity("simulate", *argv, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("capacity simulate: error:")


def test_from_mapping_names_the_field():
    with pytest.raises(UserError, match=r"^target\.simulator\.max_num_seqs: must be a positive integer$"):
        SimConfig.from_mapping({"max_num_seqs": 0})
    with pytest.raises(UserError, match=r"^target\.simulator\.max_num_seqs: must be an integer$"):
        SimConfig.from_mapping({"max_num_seqs": True})
    with pytest.raises(UserError, match=r"^target\.simulator\.max_num_sequences: unknown simulator setting"):
        SimConfig.from_mapping({"max_num_sequences": 4})
    with pytest.raises(UserError, match=r"^x\.prefix_cache: must be true or false$"):
        SimConfig.from_mapping({"prefix_cache": "yes"}, where="x")
    with pytest.raises(UserError, match=r"^target\.simulator: must be a mapping"):
        SimConfig.from_mapping([1])
    with pytest.raises(UserError, match=r"^max_num_seqs: must be a positive integer$"):
        SimConfig(max_num_seqs=0)
    with pytest.raises(UserError, match=r"^target\.simulator\.kv_cache_tokens: must be at least max_model_len"):
        SimConfig.from_mapping({"kv_cache_tokens": 100})
    cfg = SimConfig.from_mapping({"max_num_seqs": 4, "decode_base_ms": 5, "prefix_cache": True})
    assert cfg == SimConfig(max_num_seqs=4, decode_base_ms=5.0, prefix_cache=True)


def test_to_argv_round_trips_through_the_cli_parser():
    from capacity_plugins.simulator.cli import build_parser

    cfg = SimConfig(max_num_seqs=3, prefix_cache=True, error_rate=0.25, model="m2", force_max_tokens=True)
    ns = build_parser().parse_args(cfg.to_argv())
    assert SimConfig.from_namespace(ns) == cfg
    assert SimConfig().to_argv() == []


# -- process lifecycle ----------------------------------------------------------------------------
def test_capacity_simulate_serves_until_sigterm():
    import signal

    proc = popen([*CAPACITY, "simulate", "--port", "0", "--max-num-seqs", "2"], stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        assert line.startswith("capacity-simulator ready on http://127.0.0.1:")
        port = int(line.rsplit(":", 1)[1])
        assert request(port, "GET", "/health").status == 200
        assert 'max_num_seqs="2"' in request(port, "GET", "/metrics").body.decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_launcher_reports_a_simulator_that_dies_at_start(tmp_path):
    from capacity_plugins.errors import RunError
    from capacity_plugins.simulator.launch import SimulatorProcess

    with pytest.raises(RunError, match=r"exited with code 2 before it was ready: .*--truth-log: folder"):
        SimulatorProcess(truth_log=tmp_path / "missing" / "truth.jsonl")


def test_simulator_exits_when_its_launcher_goes_away(start_simulator):
    sim = start_simulator()
    sim._proc.stdin.close()  # what the kernel does when the launching process dies
    assert sim._proc.wait(timeout=10) == 0


def test_all_faults_at_once_every_request_ends_and_the_engine_drains(start_simulator, tmp_path):
    import random

    from capacity_plugins.simulator.rawclient import Connection

    truth = tmp_path / "t.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=3, decode_base_ms=1.0, decode_per_seq_ms=0.2,
                          error_rate=0.1, queue_limit_429=5, disconnect_prob=0.2, stall_prob=0.2, stall_s=0.05,
                          malformed_prob=0.2, stream_error_prob=0.2, reasoning_tokens=2, tokens_per_write=2,
                          prefix_cache=True)
    bodies = [
        ("/v1/chat/completions", lambda s, n: {**chat_body(n, s)}),
        ("/v1/completions", lambda s, n: {"prompt": "abc " * n, "max_tokens": n, "stream": s}),
        ("/generate_stream", lambda s, n: {"inputs": "x " * n, "parameters": {"max_new_tokens": n}}),
        ("/generate", lambda s, n: {"inputs": "x", "parameters": {"max_new_tokens": n, "details": True}}),
        ("/api/chat", lambda s, n: {"model": "sim-model", "messages": [{"role": "user", "content": "y"}],
                                    "stream": s, "options": {"num_predict": n}}),
        ("/api/generate", lambda s, n: {"model": "sim-model", "prompt": "y", "stream": s,
                                        "options": {"num_predict": n}}),
        # Triton: streamed token by token, or (no stream flag) one event at the end; and whole.
        ("/v2/models/sim-model/generate_stream", lambda s, n: {"text_input": "z", "max_tokens": n, "stream": s}),
        ("/v2/models/sim-model/generate", lambda s, n: {"text_input": "z", "parameters": {"max_tokens": n}}),
    ]
    sent = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(15):
            path, make = rng.choice(bodies)
            with Connection(sim.port, timeout=10) as conn:
                sent.append(conn.request("POST", path, make(rng.random() < 0.5, rng.randint(1, 20))).status)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = truth_rows(truth, len(sent))
    assert len(rows) == len(sent) == 90
    kinds = {r["error_kind"] for r in rows}
    assert {None, "http_5xx", "stream_cut", "malformed", "server_error"} <= kinds
    # Every request has its truth line, so the engine has already freed them all: compare the
    # parsed values (a substring match on "... 0.0" also accepted 0.0003, a leaked KV gauge).
    after = scrape(sim.port)
    assert metric(after, "vllm:num_requests_running") == 0 and metric(after, "vllm:num_requests_waiting") == 0
    assert metric(after, "vllm:kv_cache_usage_perc") == 0
    sim._stderr.seek(0)
    assert sim._stderr.read() == b""  # no exception escaped a callback
