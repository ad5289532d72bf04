
import orjson
import pytest
from helpers.paths import TESTS

from capacity_plugins.contracts.dialects import TritonFields
from capacity_plugins.contracts.records import RequestRecord, Timings
from capacity_plugins.corpus import Sample
from capacity_plugins.dialects import (
    NO_OUTPUT,
    OUTPUT,
    REASONING,
    VISIBLE,
    MalformedEvent,
    RequestParams,
    get_dialect,
)
from capacity_plugins.dialects.fastpath import BodyEvents
from capacity_plugins.errors import UserError


def sample(max_tokens=None, messages=None):
    return Sample.make("s1", prompt=None if messages else "hello there", messages=messages, max_tokens=max_tokens)


def body(call):
    return orjson.loads(call.body)


def test_unknown_dialect_is_a_user_error_naming_the_known_ones():
    with pytest.raises(UserError, match="unknown dialect 'nope'.*openai-chat"):
        get_dialect("nope")


def test_openai_chat_request_fields():
    p = RequestParams(model="m", max_tokens=64, temperature=0.0, top_p=0.9, ignore_eos=True)
    call = get_dialect("openai-chat").build(sample(), p)
    b = body(call)
    assert call.path == "/v1/chat/completions"
    assert b["messages"] == [{"role": "user", "content": "hello there"}]
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert b["max_tokens"] == 64 and b["temperature"] == 0.0 and b["top_p"] == 0.9
    assert b["ignore_eos"] is True and b["min_tokens"] == 64


def test_per_sample_max_tokens_wins_and_no_usage_and_no_stream():
    call = get_dialect("openai-completions").build(sample(max_tokens=7), RequestParams(max_tokens=64, include_usage=False))
    assert body(call)["max_tokens"] == 7 and call.max_tokens == 7 and "stream_options" not in body(call)
    assert body(call)["prompt"] == "hello there"
    call = get_dialect("openai-chat").build(sample(), RequestParams(max_tokens=64, stream=False))
    assert body(call)["stream"] is False and "stream_options" not in body(call)


def test_tgi_and_ollama_requests():
    tgi = get_dialect("tgi")
    c = tgi.build(sample(), RequestParams(max_tokens=9, temperature=0.0))
    assert c.path == "/generate_stream"
    assert body(c)["parameters"] == {"details": True, "max_new_tokens": 9, "do_sample": False}
    assert tgi.build(sample(), RequestParams(stream=False)).path == "/generate"
    o = get_dialect("ollama").build(sample(), RequestParams(model="llama", max_tokens=5, stream=False))
    assert o.path == "/api/chat" and body(o)["options"] == {"num_predict": 5} and body(o)["stream"] is False
    g = get_dialect("ollama-generate").build(sample(), RequestParams(model="llama", max_tokens=5))
    assert g.path == "/api/generate" and body(g)["prompt"] == "hello there"


def chat_chunk(delta, usage=None, finish=None):
    d = {"id": "r1", "choices": [{"delta": delta, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = usage
    return orjson.dumps(d)


def test_openai_chat_channels_role_reasoning_tools_content():
    p = get_dialect("openai-chat").parser(True)
    assert p.event(chat_chunk({"role": "assistant", "content": ""})) == NO_OUTPUT
    assert p.response_id == "r1"
    assert p.event(chat_chunk({"reasoning_content": "thinking"})) == REASONING
    assert p.event(chat_chunk({"reasoning": "more"})) == REASONING
    assert p.event(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]})) == OUTPUT
    assert p.event(chat_chunk({"content": "Hi"})) == VISIBLE
    assert not p.done
    assert p.event(chat_chunk({"content": "!"}, finish="stop")) == VISIBLE
    assert p.done
    assert p.event(orjson.dumps({"id": "r1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}})) == NO_OUTPUT
    assert p.usage_output_tokens == 6 and p.prompt_tokens == 3
    assert p.event(b"[DONE]") == NO_OUTPUT


def test_openai_continuous_usage_gives_tokens_per_chunk():
    p = get_dialect("openai-chat").parser(True)
    p.event(chat_chunk({"content": "ab"}, usage={"prompt_tokens": 3, "completion_tokens": 2}))
    assert p.chunk_tokens == 2
    p.event(chat_chunk({"content": "c"}, usage={"prompt_tokens": 3, "completion_tokens": 3}))
    assert p.chunk_tokens == 1 and p.continuous_output_tokens == 3 and p.usage_output_tokens is None


def test_openai_in_stream_error_and_malformed():
    p = get_dialect("openai-chat").parser(True)
    assert p.event(b'{"error": {"message": "boom", "code": 500}}') == NO_OUTPUT
    assert p.error == "boom"
    with pytest.raises(MalformedEvent):
        get_dialect("openai-chat").parser(True).event(b"{not json")
    with pytest.raises(MalformedEvent):
        get_dialect("openai-chat").parser(True).event(b"[1, 2]")


def test_openai_completions_and_non_stream_bodies():
    p = get_dialect("openai-completions").parser(True)
    assert p.event(b'{"id":"c","choices":[{"text":""}]}') == NO_OUTPUT
    assert p.event(b'{"id":"c","choices":[{"text":"x"}]}') == VISIBLE
    full = get_dialect("openai-chat").parser(False)
    doc = {"id": "f", "choices": [{"message": {"content": "hey"}}], "usage": {"prompt_tokens": 2, "completion_tokens": 4}}
    assert full.full(orjson.dumps(doc)) == VISIBLE
    assert (full.response_id, full.usage_output_tokens, full.prompt_tokens, full.done) == ("f", 4, 2, True)


def test_tgi_stream_tokens_special_and_details():
    p = get_dialect("tgi").parser(True)
    assert p.event(b'{"token":{"id":1,"text":"Hi","special":false},"details":null}') == VISIBLE
    assert p.event(b'{"token":{"id":2,"text":"</s>","special":true},"generated_text":"Hi","details":{"generated_tokens":2}}') == OUTPUT
    assert p.done and p.usage_output_tokens == 2
    e = get_dialect("tgi").parser(True)
    e.event(b'{"error":"Input validation error","error_type":"validation"}')
    assert e.error == "Input validation error"
    f = get_dialect("tgi").parser(False)
    assert f.full(b'{"generated_text":"abc","details":{"generated_tokens":3}}') == VISIBLE and f.usage_output_tokens == 3


def test_ollama_ndjson_thinking_content_done():
    p = get_dialect("ollama").parser(True)
    assert p.framing == "ndjson"
    assert p.event(b'{"message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}') == REASONING
    assert p.event(b'{"message":{"role":"assistant","content":"Hi"},"done":false}') == VISIBLE
    assert p.event(b'{"message":{"role":"assistant","content":""},"done":true,"eval_count":2,"prompt_eval_count":9}') == NO_OUTPUT
    assert p.done and p.usage_output_tokens == 2 and p.prompt_tokens == 9
    g = get_dialect("ollama-generate").parser(True)
    assert g.event(b'{"response":"x","done":false}') == VISIBLE
    g.event(b'{"error":"model not found"}')
    assert g.error == "model not found"


# -- model listing -------------------------------------------------------------------------

# Answers as the servers send them (vLLM 0.x /v1/models, TGI 3.x /info, Ollama 0.x /api/tags).
VLLM_MODELS = (b'{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model",'
               b'"created":1730000000,"owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,'
               b'"max_model_len":131072,"permission":[{"id":"modelperm-1","allow_sampling":true}]},'
               b'{"id":"my-lora","object":"model","owned_by":"vllm","root":"/adapters/my-lora",'
               b'"parent":"meta-llama/Llama-3.1-8B-Instruct"}]}')
TGI_INFO = (b'{"model_id":"bigscience/bloom-560m","model_sha":"ac2ae5fab2ce3f9f40dc79b5ca9f637430d24971",'
            b'"model_dtype":"torch.float16","model_device_type":"cuda","model_pipeline_tag":"text-generation",'
            b'"max_concurrent_requests":128,"max_input_tokens":1024,"max_total_tokens":2048,'
            b'"router":"text-generation-router","version":"3.0.1","sha":null,"docker_label":null}')
OLLAMA_TAGS = (b'{"models":[{"name":"llama3.2:latest","model":"llama3.2:latest","modified_at":'
               b'"2025-01-10T09:12:00.1+01:00","size":2019393189,"digest":"a80c4f17acd5","details":'
               b'{"format":"gguf","family":"llama","parameter_size":"3.2B","quantization_level":"Q4_K_M"}},'
               b'{"name":"qwen2.5:7b","model":"qwen2.5:7b","size":4683087332}]}')

# Triton 25.x `GET /v2/models/ensemble` for a TensorRT-LLM ensemble (trimmed to four inputs).
TRITON_METADATA = (b'{"name":"ensemble","versions":["1"],"platform":"ensemble","inputs":[{"name":"text_input",'
                   b'"datatype":"BYTES","shape":[-1]},{"name":"max_tokens","datatype":"INT32","shape":[-1]},'
                   b'{"name":"stream","datatype":"BOOL","shape":[-1]},{"name":"exclude_input_in_output",'
                   b'"datatype":"BOOL","shape":[-1]}],"outputs":[{"name":"text_output","datatype":"BYTES",'
                   b'"shape":[-1]}]}')


@pytest.mark.parametrize(
    ("dialect", "path", "body", "models"),
    [
        ("openai-chat", "/v1/models", VLLM_MODELS, ["meta-llama/Llama-3.1-8B-Instruct", "my-lora"]),
        ("openai-completions", "/v1/models", VLLM_MODELS, ["meta-llama/Llama-3.1-8B-Instruct", "my-lora"]),
        ("tgi", "/info", TGI_INFO, ["bigscience/bloom-560m"]),
        ("ollama", "/api/tags", OLLAMA_TAGS, ["llama3.2:latest", "qwen2.5:7b"]),
        ("ollama-generate", "/api/tags", OLLAMA_TAGS, ["llama3.2:latest", "qwen2.5:7b"]),
        ("triton-generate", "/v2/models/{model}", TRITON_METADATA, ["ensemble"]),
    ],
)
def test_each_dialect_says_where_models_are_listed_and_reads_the_listing(dialect, path, body, models):
    d = get_dialect(dialect)
    assert d.models_path == path
    assert d.parse_models(body) == models
    assert type(d).parse_models(body) == models  # usable without an instance (the registry holds classes)


def test_every_registered_dialect_lists_models():
    from capacity_plugins.dialects import DIALECTS

    for name in DIALECTS:
        d = get_dialect(name)
        assert d.models_path is None or d.models_path.startswith("/"), name
        assert d.parse_models(b"") is None, name


@pytest.mark.parametrize("dialect", ["openai-chat", "tgi", "ollama", "triton-generate"])
@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>404 Not Found</body></html>",
        b'{"detail":"Not Found"}',
        b'{"error":{"message":"Invalid API key","type":"invalid_request_error"}}',
        b"[]",
        b'"models"',
        b"\xff\xfe{",
        b'{"data": {"id": "x"}, "models": "x", "model_id": 7}',  # right keys, wrong types
    ],
)
def test_a_body_that_is_not_a_listing_is_none(dialect, body):
    assert get_dialect(dialect).parse_models(body) is None


def test_listings_of_another_api_are_not_read_as_this_one():
    assert get_dialect("openai-chat").parse_models(OLLAMA_TAGS) is None
    assert get_dialect("ollama").parse_models(VLLM_MODELS) is None
    assert get_dialect("tgi").parse_models(VLLM_MODELS) is None
    assert get_dialect("triton-generate").parse_models(OLLAMA_TAGS) is None
    assert get_dialect("triton-generate").parse_models(TGI_INFO) is None
    assert get_dialect("ollama").parse_models(TRITON_METADATA) is None


def test_empty_listing_and_odd_entries():
    assert get_dialect("openai-chat").parse_models(b'{"object":"list","data":[]}') == []
    assert get_dialect("ollama").parse_models(b'{"models":[]}') == []
    odd = b'{"data":[{"id":"good"},{"id":null},{"id":""},{"id":42},"bare",null,{"name":"x"},{"id":"also"}]}'
    assert get_dialect("openai-chat").parse_models(odd) == ["good", "also"]
    assert get_dialect("tgi").parse_models(b'{"model_id":""}') is None


# -- Triton generate ---------------------------------------------------------------------------


def triton(**fields):
    return get_dialect("triton-generate", TritonFields(**fields))


def triton_event(text, **extra):
    # as Triton writes it: sorted keys, outputs next to model_name / model_version
    return orjson.dumps({"model_name": "ensemble", "model_version": "1", "text_output": text, **extra},
                        option=orjson.OPT_SORT_KEYS)


def test_triton_request_top_level_streaming():
    call = triton().build(sample(max_tokens=7), RequestParams(model="ensemble", max_tokens=64, temperature=0.0,
                                                              top_p=0.9))
    assert call.method == "POST" and call.path == "/v2/models/ensemble/generate_stream"
    assert call.headers["Accept"] == "text/event-stream" and call.max_tokens == 7
    # `stream: true` or both backends answer one event at the end; no backend-only name (min_length)
    assert body(call) == {"text_input": "hello there", "max_tokens": 7, "temperature": 0.0, "top_p": 0.9,
                          "stream": True}


def test_triton_request_in_parameters_with_the_models_own_names():
    d = triton(input_field="prompt", max_tokens_field="max_new_tokens", params_in="parameters")
    call = d.build(sample(), RequestParams(model="my model/1", max_tokens=5, stream=False, ignore_eos=True))
    assert call.path == "/v2/models/my%20model%2F1/generate"  # the name is one URL segment
    assert call.headers["Accept"] == "application/json"
    # non-streamed: both backends echo the prompt unless told not to
    assert body(call) == {"prompt": "hello there", "parameters": {
        "max_new_tokens": 5, "ignore_eos": True, "min_tokens": 5, "exclude_input_in_output": True}}
    assert "max_tokens" not in body(d.build(sample(), RequestParams(model="m", max_tokens=None)))


def test_triton_delta_stream_error_and_finish_reason():
    p = triton().parser(True)
    p.keep_text()
    assert p.framing == "sse"
    assert p.event(triton_event(" The", finish_reason="None")) == VISIBLE
    assert p.done  # Triton has no last event: the end of the body is the end
    assert p.event(triton_event("")) == NO_OUTPUT
    assert p.event(triton_event([" cat", " dog"])) == VISIBLE  # a tensor of two sequences: the first
    assert p.finish_reason is None  # "None": the vLLM backend's not-finished-yet
    assert p.event(triton_event(" sat", finish_reason=["length"], id="req-1")) == VISIBLE
    assert p.finish_reason == "length" and p.response_id == "req-1"
    assert p.generated_text() == " The cat sat"
    assert (p.usage_output_tokens, p.continuous_output_tokens, p.chunk_tokens, p.prompt_tokens) == (None,) * 4
    e = triton().parser(True)
    assert e.event(b'{"error":"in-flight batching failed"}') == NO_OUTPUT
    assert e.error == "in-flight batching failed" and not e.done


def test_triton_output_name_that_is_not_in_the_response_is_malformed():
    # A wrong --triton-output-field must not read as an empty answer of every request.
    with pytest.raises(MalformedEvent, match="'generated_text'.*--triton-output-field"):
        triton(output_field="generated_text").parser(True).event(triton_event(" x"))
    with pytest.raises(MalformedEvent):
        triton().parser(True).event(triton_event(7))
    with pytest.raises(MalformedEvent):
        triton().parser(False).full(b"[]")


def test_triton_cumulative_stream_counts_what_each_event_adds():
    p = triton(outputs="cumulative").parser(True)
    p.keep_text()
    kinds = [p.event(triton_event(t)) for t in [" The", " The", " The cat", " The cat sat", " The cat"]]
    # an event that adds nothing (the same text, or a re-decode that is shorter) is no output
    assert kinds == [VISIBLE, NO_OUTPUT, VISIBLE, VISIBLE, NO_OUTPUT]
    assert p.generated_text() == " The cat"


def test_triton_auto_learns_cumulative_once_for_every_later_request():
    d = triton()  # outputs: auto
    first = d.parser(True)
    assert [first.event(triton_event(t)) for t in [" a", " a b", " a b c", " a b c d"]] == [VISIBLE] * 4
    # A later request's repeat is read as cumulative from its first event on.
    later = d.parser(True)
    later.keep_text()
    assert [later.event(triton_event(t)) for t in [" x", " x", " x y"]] == [VISIBLE, NO_OUTPUT, VISIBLE]
    assert later.generated_text() == " x y"
    # Each dialect instance (each run's process) learns for itself.
    fresh = triton().parser(True)
    fresh.keep_text()
    assert [fresh.event(triton_event(t)) for t in [" x", " x"]] == [VISIBLE, VISIBLE]


def test_triton_auto_learns_deltas_and_a_prefix_delta_no_longer_misleads():
    d = triton()
    first = d.parser(True)
    first.keep_text()
    assert [first.event(triton_event(t)) for t in ["\n", "\n\n", " a", " b"]] == [VISIBLE] * 4
    assert first.generated_text() == "\n\n\n a b"
    later = d.parser(True)
    later.keep_text()
    assert [later.event(triton_event(t)) for t in [" x", " x y", " x y"]] == [VISIBLE] * 3
    assert later.generated_text() == " x x y x y"


def test_triton_non_streamed_body():
    f = triton().parser(False)
    f.keep_text()
    assert f.full(triton_event(" all of it", finish_reason="stop")) == VISIBLE
    assert f.done and f.finish_reason == "stop" and f.generated_text() == " all of it"
    assert triton().parser(False).full(triton_event("")) == NO_OUTPUT


def test_triton_metadata_is_the_one_named_models_listing():
    d = get_dialect("triton-generate")
    assert d.ready_path == "/v2/health/ready"
    assert d.parse_models(b'{"name":"ensemble","versions":["1"]}') is None  # no inputs: not model metadata
    assert d.parse_models(b'{"error":"Request for unknown model: \'x\' is not found"}') is None


@pytest.mark.parametrize(
    ("fields", "key", "why"),
    [
        ({"input_field": ""}, "input_field", "non-empty"),
        ({"output_field": " text_output"}, "output_field", "surrounding spaces"),
        ({"input_field": "parameters"}, "input_field", "uses"),
        ({"max_tokens_field": "stream"}, "max_tokens_field", "uses"),
        ({"output_field": "error"}, "output_field", "uses"),
        ({"max_tokens_field": "text_input"}, "max_tokens_field", "differ from input_field"),
        ({"params_in": "body"}, "params_in", "top, parameters"),
        ({"outputs": "deltas"}, "outputs", "auto, delta, cumulative"),
    ],
)
def test_triton_fields_name_the_bad_setting(fields, key, why):
    found = TritonFields(**fields).problem()
    assert found is not None and found[0] == key and why in found[1]


def test_triton_fields_defaults_and_names_of_other_models_are_fine():
    assert TritonFields().problem() is None
    assert TritonFields(input_field="INPUT_0", max_tokens_field="INPUT_1", output_field="OUTPUT_0").problem() is None


def test_an_sse_event_that_never_ends_is_bounded():
    from capacity_plugins.dialects import MalformedEvent
    from capacity_plugins.dialects.framing import MAX_EVENT_BYTES, SSEDecoder

    d = SSEDecoder()
    line = b"data: " + b"x" * 1023 + b"\n"
    with pytest.raises(MalformedEvent, match="without its ending blank line"):
        for _ in range(MAX_EVENT_BYTES // 1024 + 2):
            d.feed(line)


# Streams in the forms the servers document for reasoning and tool calls (tests/data_streams/README.md):
# (file, dialect, reasoning tokens, their source, visible tokens, output events by channel)
STREAMS = [
    ("vllm_reasoning_tool.sse", "openai-chat", 8, "channel", 9, {"reasoning": 8, "visible": 4, "other": 5}),
    ("sglang_reasoning_tool.sse", "openai-chat", 7, "channel", 11, {"reasoning": 7, "visible": 3, "other": 1}),
    ("ollama_thinking_tool.ndjson", "ollama", 5, "channel", 4, {"reasoning": 5, "visible": 2, "other": 1}),
    ("openai_usage_reasoning.sse", "openai-chat", 192, "usage", 10, {"reasoning": 0, "visible": 2, "other": 0}),
]


@pytest.mark.parametrize(("name", "dialect", "reasoning", "source", "visible", "events"), STREAMS,
                         ids=[s[0] for s in STREAMS])
def test_documented_reasoning_and_tool_call_streams_count_by_channel(name, dialect, reasoning, source, visible, events):
    body = (TESTS / "data_streams" / name).read_bytes()
    parser = get_dialect(dialect).parser(True)
    t = Timings(sent_unix=0.0, sent_ns=0)
    events_in = BodyEvents(parser, t, 1 << 20)
    # one event per read (each its own stamp, 1 ms apart), the way a server writes them
    lines = body.split(b"\n\n" if parser.framing == "sse" else b"\n")
    sep = b"\n\n" if parser.framing == "sse" else b"\n"
    for i, piece in enumerate(p for p in lines if p):
        assert not events_in.block(piece + sep, (i + 1) * 1_000_000)
    events_in.finish(b"", len(lines) * 1_000_000)
    t.end_ns = (len(lines) + 1) * 1_000_000
    assert parser.done and parser.error is None
    counted = {"reasoning": t.reasoning_events, "visible": t.visible_events,
               "other": len(t.token_ns) - t.reasoning_events - t.visible_events}
    assert counted == events
    rec = RequestRecord.build(
        t, request_id="r", response_id=parser.response_id, prompt_id=None, worker=0, step=None, warmup=False,
        attempt=1, status=200, error_kind=None, error=None, usage_output_tokens=parser.usage_output_tokens,
        continuous_output_tokens=None, prompt_tokens=parser.prompt_tokens, max_tokens=None, stream=True,
        usage_reasoning_tokens=parser.usage_reasoning_tokens)
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source, rec.visible_output_tokens) == (reasoning, source, visible)
    # the first visible content comes after the thinking (TTFT: the first token of any channel)
    assert rec.first_visible_ms == rec.ttft_ms + events["reasoning"]
