"""Wire framing of every dialect the simulator speaks, against a real simulator process."""

from __future__ import annotations

import json

import pytest

from capacity_plugins.simulator.rawclient import Connection, request
from capacity_plugins.simulator.truth import read_truth

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "Say something."}]}


def chat(port: int, **extra: object):
    return request(port, "POST", "/v1/chat/completions", {**CHAT, **extra})


def events(resp) -> list[dict]:
    payloads = resp.sse_events()
    assert payloads[-1] == b"[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def test_chat_stream_with_usage_is_framed_like_vllm(simulator):
    resp = chat(simulator.port, max_tokens=7, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    assert resp.status == 200 and resp.complete
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["transfer-encoding"] == "chunked"
    # One SSE event per HTTP chunk (one write each), each ending with the blank line.
    for _, chunk in resp.chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and chunk.count(b"data:") == 1
    evs = events(resp)
    ids = {e["id"] for e in evs}
    assert ids == {resp.headers["x-request-id"]} and next(iter(ids)).startswith("chatcmpl-")
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "sim-model" for e in evs)
    role, *content, usage = evs
    assert role["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}]
    assert len(content) == 7
    assert all(e["choices"][0]["delta"]["content"] for e in content)
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 6 + ["length"]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 7
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 7


def test_chat_stream_without_usage_has_no_usage_chunk(simulator):
    resp = chat(simulator.port, max_tokens=3, ignore_eos=True, stream=True)
    evs = events(resp)
    assert len(evs) == 1 + 3
    assert all("usage" not in e and e["choices"] for e in evs)
    assert resp.body.endswith(b"data: [DONE]\n\n")


def test_continuous_usage_counts_tokens_in_every_chunk(simulator):
    resp = chat(simulator.port, max_tokens=4, ignore_eos=True, stream=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True})
    evs = events(resp)
    assert [e["usage"]["completion_tokens"] for e in evs] == [0, 1, 2, 3, 4, 4]


def test_completions_stream_and_non_stream(simulator):
    resp = request(simulator.port, "POST", "/v1/completions",
                   {"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}})
    *content, usage = events(resp)
    assert len(content) == 5
    assert all(e["object"] == "text_completion" and e["id"].startswith("cmpl-") for e in content)
    assert all(e["choices"][0]["text"] for e in content) and content[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    body = request(simulator.port, "POST", "/v1/completions",
                   {"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True}).json()
    assert body["object"] == "text_completion" and len(body["choices"][0]["text"].split()) == 5
    assert body["usage"]["completion_tokens"] == 5 and body["choices"][0]["finish_reason"] == "length"


def test_chat_non_stream_shape(simulator):
    resp = chat(simulator.port, max_tokens=6, ignore_eos=True, temperature=0.7, top_p=0.9)
    body = resp.json()
    assert resp.headers["content-length"] and body["id"] == resp.headers["x-request-id"]
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"].split()) == 6
    assert body["usage"] == {"prompt_tokens": body["usage"]["prompt_tokens"], "total_tokens":
                             body["usage"]["prompt_tokens"] + 6, "completion_tokens": 6,
                             "prompt_tokens_details": None}


def test_output_length_is_drawn_up_to_max_tokens_unless_ignore_eos(simulator):
    lengths = [chat(simulator.port, max_tokens=12, min_tokens=8).json()["usage"]["completion_tokens"]
               for _ in range(10)]
    assert all(8 <= n <= 12 for n in lengths) and len(set(lengths)) > 1
    finish = chat(simulator.port, max_tokens=4).json()["choices"][0]
    assert finish["finish_reason"] in ("stop", "length")


def test_reasoning_deltas_come_before_content(start_simulator):
    sim = start_simulator(reasoning_tokens=3)
    evs = events(chat(sim.port, max_tokens=6, ignore_eos=True, stream=True))
    deltas = [e["choices"][0]["delta"] for e in evs[1:]]
    assert [next(iter(d)) for d in deltas] == ["reasoning_content"] * 3 + ["content"] * 3
    body = chat(sim.port, max_tokens=6, ignore_eos=True).json()
    assert len(body["choices"][0]["message"]["reasoning_content"].split()) == 3


def test_tokens_per_write_coalesces_tokens_into_one_chunk(start_simulator, tmp_path):
    sim = start_simulator(tokens_per_write=4, truth_log=tmp_path / "truth.jsonl")
    resp = chat(sim.port, max_tokens=10, ignore_eos=True, stream=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True})
    evs = events(resp)
    assert [e["usage"]["completion_tokens"] for e in evs[1:-1]] == [4, 8, 10]
    assert [len(e["choices"][0]["delta"]["content"].split()) for e in evs[1:-1]] == [4, 4, 2]
    truth = read_truth(tmp_path / "truth.jsonl", 1)[-1]
    assert truth["tokens_per_write"] == [4, 4, 2] and truth["output_tokens"] == 10


def test_tgi_generate_stream_and_generate(simulator):
    resp = request(simulator.port, "POST", "/generate_stream",
                   {"inputs": "Hello", "parameters": {"max_new_tokens": 4}})
    assert resp.status == 200 and resp.headers["content-type"] == "text/event-stream"
    assert all(chunk.startswith(b'data:{"index":') for _, chunk in resp.chunks)
    evs = [json.loads(p) for p in resp.sse_events()]
    assert [e["index"] for e in evs] == list(range(1, len(evs) + 1)) and 2 <= len(evs) <= 4
    assert all(e["generated_text"] is None and e["details"] is None for e in evs[:-1])
    last = evs[-1]
    assert last["generated_text"] == "".join(e["token"]["text"] for e in evs)
    assert last["details"]["generated_tokens"] == len(evs)
    assert last["details"]["finish_reason"] in ("length", "eos_token")
    assert set(evs[0]["token"]) == {"id", "text", "logprob", "special"}
    body = request(simulator.port, "POST", "/generate",
                   {"inputs": "Hello", "parameters": {"max_new_tokens": 4, "details": True}}).json()
    assert body["details"]["generated_tokens"] == len(body["details"]["tokens"])
    assert body["generated_text"] == "".join(t["text"] for t in body["details"]["tokens"])
    plain = request(simulator.port, "POST", "/generate", {"inputs": "Hello", "parameters": {"max_new_tokens": 2}})
    assert set(plain.json()) == {"generated_text"}
    info = request(simulator.port, "GET", "/info").json()
    assert info["model_id"] == "sim-model" and info["max_total_tokens"] == 4096


def test_ollama_chat_ndjson_and_generate(simulator):
    resp = request(simulator.port, "POST", "/api/chat",
                   {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                    "options": {"num_predict": 5}})
    assert resp.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in resp.body.splitlines()]
    assert all(chunk.endswith(b"\n") and chunk.count(b"\n") == 1 for _, chunk in resp.chunks)
    *tokens, final = lines
    assert all(not t["done"] and t["message"]["role"] == "assistant" and t["message"]["content"] for t in tokens)
    assert final["done"] is True and final["done_reason"] in ("stop", "length")
    assert final["eval_count"] == len(tokens) <= 5 and final["prompt_eval_count"] > 0
    assert final["total_duration"] >= final["eval_duration"] > 0
    body = request(simulator.port, "POST", "/api/generate",
                   {"model": "sim-model", "prompt": "hi", "stream": False, "options": {"num_predict": 3}}).json()
    assert body["done"] is True and len(body["response"].split()) == body["eval_count"] <= 3
    assert request(simulator.port, "GET", "/api/tags").json()["models"][0]["name"] == "sim-model"
    assert "version" in request(simulator.port, "GET", "/api/version").json()


def test_info_endpoints_and_keep_alive(simulator):
    with Connection(simulator.port) as conn:
        assert conn.request("GET", "/health").status == 200
        models = conn.request("GET", "/v1/models").json()
        assert models["data"][0]["id"] == "sim-model"
        assert conn.request("GET", "/version").json()["version"]
        # The same connection carries a streamed response and then another request.
        assert conn.request("POST", "/v1/chat/completions", {**CHAT, "max_tokens": 2, "stream": True}).complete
        missing = conn.request("GET", "/nope")
        assert missing.status == 404 and missing.json()["object"] == "error"


@pytest.mark.parametrize("dialect_path", ["/v1/chat/completions", "/generate_stream", "/api/chat"])
def test_every_dialect_reports_the_response_id_in_a_header(simulator, dialect_path):
    body = ({"inputs": "x", "parameters": {"max_new_tokens": 2}} if dialect_path == "/generate_stream"
            else {**CHAT, "max_tokens": 2, "options": {"num_predict": 2}})
    resp = request(simulator.port, "POST", dialect_path, body)
    assert resp.status == 200 and resp.headers["x-request-id"]


def test_truth_log_keys_every_dialect_by_the_response_id(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth)
    sent = {
        "openai": request(sim.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True}),
        "tgi": request(sim.port, "POST", "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}}),
        "ollama": request(sim.port, "POST", "/api/generate", {"model": "sim-model", "prompt": "x",
                                                             "options": {"num_predict": 2}}),
    }
    rows = {r["id"]: r for r in read_truth(truth, 3)}
    for dialect, resp in sent.items():
        row = rows[resp.headers["x-request-id"]]
        assert row["dialect"] == dialect and row["status"] == 200 and row["output_tokens"] >= 1
        assert row["first_token_s"] >= row["queue_s"] + row["prefill_s"] > 0
    assert json.loads(sent["openai"].sse_events()[0])["id"] == sent["openai"].headers["x-request-id"]
