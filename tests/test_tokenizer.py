"""--tokenizer / request.tokenizer: output tokens counted by a local tokenizer.json when the server
reports no usage (docs/metrics.md: usage > continuous usage > tokenizer > chunks).

The tokenizer is helpers.tokenizer's tiny byte-level BPE: it splits most simulator words into
several tokens, so its count differs from the chunk count and a test can tell which source was used.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from helpers.processes import run_locust
from helpers.results import read_records
from helpers.scenarios import write_corpus
from helpers.tokenizer import count, make_tokenizer, sim_text
from helpers.users import local_user

from capacity_plugins.client.client import LLMClient, load_tokenizer
from capacity_plugins.client.options import overridden, shown
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.records import RequestRecord, Timings
from capacity_plugins.dialects import get_dialect
from capacity_plugins.errors import UserError
from capacity_plugins.scenario import load_scenario
from capacity_plugins.simulator.truth import read_truth


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    return make_tokenizer(tmp_path / "tokenizer.json")


# -- parsers keep the generated text only when asked ---------------------------------------------------


def sse(*docs) -> list[bytes]:
    return [d if isinstance(d, bytes) else orjson.dumps(d) for d in docs]


def feed(dialect: str, events: list[bytes], keep: bool = True):
    p = get_dialect(dialect).parser(True)
    if keep:
        p.keep_text()
    for e in events:
        p.event(e)
    return p


CHAT_STREAM = sse(
    {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"reasoning_content": "Let me think.", "reasoning": "Let me think."}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": " world"}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "t", "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"Paris\"}"}}]},
                              "finish_reason": "tool_calls"}]},
    b"[DONE]",
)


def test_openai_chat_stream_keeps_reasoning_content_and_tool_arguments():
    p = feed("openai-chat", CHAT_STREAM)
    # reasoning_content and reasoning are one channel under two names: counted once; the tool name is
    # not generated text, its arguments are
    assert p.generated_text() == "Let me think.Hello world{\"city\": \"Paris\"}"
    assert p.usage_output_tokens is None and p.done


def test_without_keep_text_the_parser_keeps_nothing():
    p = feed("openai-chat", CHAT_STREAM, keep=False)
    assert p.texts is None and p.generated_text() is None
    assert not hasattr(p, "__dict__")  # __slots__ still hold: no per-instance dict on the hot path


def test_openai_chat_full_body():
    p = get_dialect("openai-chat").parser(False)
    p.keep_text()
    p.full(orjson.dumps({"id": "c", "choices": [{"message": {
        "role": "assistant", "reasoning_content": "hmm ", "content": "the answer",
        "tool_calls": [{"function": {"name": "f", "arguments": "{\"x\":1}"}}]}}]}))
    assert p.generated_text() == "hmm the answer{\"x\":1}"


def test_openai_completions_stream_and_full():
    p = feed("openai-completions", sse(
        {"id": "k", "choices": [{"index": 0, "text": "one"}]},
        {"id": "k", "choices": [{"index": 0, "text": " two", "finish_reason": "length"}]},
        {"id": "k", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        b"[DONE]",
    ))
    assert p.generated_text() == "one two" and p.usage_output_tokens == 2
    q = get_dialect("openai-completions").parser(False)
    q.keep_text()
    q.full(orjson.dumps({"id": "k", "choices": [{"text": "all of it"}]}))
    assert q.generated_text() == "all of it"


def test_tgi_stream_omits_special_tokens_and_full_uses_generated_text():
    p = feed("tgi", sse(
        {"token": {"id": 1, "text": "Hi", "special": False}},
        {"token": {"id": 2, "text": " there", "special": False}},
        {"token": {"id": 3, "text": "</s>", "special": True}, "generated_text": "Hi there",
         "details": {"generated_tokens": 3}},
    ))
    assert p.generated_text() == "Hi there"
    q = get_dialect("tgi").parser(False)
    q.keep_text()
    q.full(orjson.dumps([{"generated_text": "Hi there"}]))
    assert q.generated_text() == "Hi there" and q.usage_output_tokens is None


def test_ollama_chat_keeps_thinking_content_and_object_arguments():
    p = feed("ollama", sse(
        {"message": {"role": "assistant", "thinking": "Hmm."}, "done": False},
        {"message": {"role": "assistant", "content": "Sure"}, "done": False},
        {"message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": {"city": "Paris"}}}]}, "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": True},
    ))
    assert p.generated_text() == "Hmm.Sure{\"city\":\"Paris\"}" and p.usage_output_tokens is None


def test_ollama_generate_stream_and_full():
    p = feed("ollama-generate", sse({"response": "a", "done": False}, {"response": " b", "done": False},
                                     {"response": "", "done": True}))
    assert p.generated_text() == "a b"
    q = get_dialect("ollama-generate").parser(False)
    q.keep_text()
    q.full(orjson.dumps({"response": "whole", "thinking": "pre ", "done": True}))
    assert q.generated_text() == "pre whole"


# -- record precedence -------------------------------------------------------------------------------------


def build(stream: bool = True, **kw) -> RequestRecord:
    t = Timings(sent_unix=1.0, sent_ns=0)
    if stream:
        t.first_token_ns, t.token_ns, t.chunk_tokens = 10, [10, 20, 30], [None, None, None]
    t.end_ns = 40
    args = dict(request_id="r", response_id=None, prompt_id="p", worker=0, step=None, warmup=False, attempt=1,
                status=200, error_kind=None, error=None, usage_output_tokens=None, continuous_output_tokens=None,
                prompt_tokens=None, max_tokens=8, stream=stream)
    return RequestRecord.build(t, **(args | kw))


def test_record_source_precedence_usage_continuous_tokenizer_chunks():
    r = build(usage_output_tokens=4, continuous_output_tokens=5, tokenizer_output_tokens=6)
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (4, "usage", 3)
    r = build(continuous_output_tokens=5, tokenizer_output_tokens=6)
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (5, "continuous_usage", 3)
    r = build(tokenizer_output_tokens=6)
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (6, "tokenizer", 3)
    r = build(tokenizer_output_tokens=3)  # the client's chunk count is reported only when it differs
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (3, "tokenizer", None)
    r = build()
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (3, "chunks", None)
    r = build(stream=False, tokenizer_output_tokens=7)  # non-streamed: no chunks, the tokenizer still counts
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (7, "tokenizer", None)
    assert r.tpot_ms is None


# -- option, scenario key, loading ----------------------------------------------------------------------


def test_option_and_scenario_key_reach_llm_options(tmp_path, tokenizer_json):
    assert overridden(LLMOptions(), SimpleNamespace(tokenizer=str(tokenizer_json))).tokenizer == str(tokenizer_json)
    assert overridden(LLMOptions(), SimpleNamespace(tokenizer="")).tokenizer is None  # the web form's unset
    assert overridden(LLMOptions(), SimpleNamespace()).tokenizer is None
    (tmp_path / "s.yaml").write_text(
        "target: {url: 'http://127.0.0.1:9', model: m}\nrequest: {usage: false, tokenizer: tokenizer.json}\n")
    s = load_scenario(tmp_path / "s.yaml")
    opts = s.options()
    assert opts.tokenizer == str(tokenizer_json.resolve())  # relative to the scenario file
    assert shown(opts)["tokenizer"] == str(tokenizer_json.resolve())  # what the flag and the web form show
    (tmp_path / "s2.yaml").write_text("target: {url: 'http://127.0.0.1:9', model: m}\n")
    assert load_scenario(tmp_path / "s2.yaml").options().tokenizer is None


def test_client_loads_once_and_rejects_bad_files(tmp_path, tokenizer_json):
    client = LLMClient(LLMOptions(tokenizer=str(tokenizer_json)))
    tok = client.tokenizer
    assert client.count_tokens(" the of and to in") == count(tokenizer_json, " the of and to in") == 7
    client.configure(LLMOptions(tokenizer=str(tokenizer_json), model="other"))  # a worker's reconfigure
    assert client.tokenizer is tok
    client.configure(LLMOptions())
    assert client.tokenizer is None
    with pytest.raises(UserError, match=r"--tokenizer: .*nope\.json: no such file"):
        load_tokenizer(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match=r"--tokenizer: .*bad\.json: not a Hugging Face tokenizer\.json") as e:
        LLMClient(LLMOptions(tokenizer=str(bad)))
    assert "\n" not in str(e.value)


# -- against the simulator -------------------------------------------------------------------------------


SIM = dict(decode_base_ms=2.0, decode_per_seq_ms=0.2, prefill_tokens_per_s=50000.0, force_max_tokens=True)


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions", "tgi", "ollama"])
@pytest.mark.parametrize("stream", [True, False])
def test_users_count_with_the_tokenizer_when_the_server_gives_no_usage(start_simulator, tmp_path,
                                                                       tokenizer_json, dialect, stream):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth_path, reasoning_tokens=3 if dialect == "openai-chat" else 0, **SIM)
    user = local_user(sim.url, tmp_path, dialect=dialect, model="sim-model", max_tokens=12, stream=stream,
                      usage=False, tokenizer=str(tokenizer_json))
    recs = [user.call() for _ in range(3)]
    counted_here = dialect.startswith("openai") and stream
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=3)} if counted_here else {}
    for r in recs:
        assert r.ok, r.error
        if counted_here:  # no usage asked for: the tokenizer counts the text (reasoning + content)
            n = truth[r.response_id]["output_tokens"]
            assert n == 12
            assert r.output_tokens_source == "tokenizer"
            assert r.output_tokens == count(tokenizer_json, sim_text(n)) != n
            assert r.client_output_tokens == n  # the chunk count, as before
        else:  # a whole OpenAI body, TGI details and Ollama eval_count always carry server usage: it wins
            assert (r.output_tokens, r.output_tokens_source) == (12, "usage")


def locust_args(url: str, tmp_path: Path, *extra: str) -> list[str]:
    corpus = write_corpus(tmp_path / "c.jsonl", 1200)
    return ["--headless", "-u", "2", "-r", "2", "-t", "3s", "--host", url, "--dialect", "openai-chat",
            "--model", "sim-model", "--corpus", str(corpus), "--min-distinct", "1000", "--max-tokens", "16",
            "--results-dir", str(tmp_path / "out"), "--only-summary", *extra]


@pytest.mark.slow  # a real locust process
def test_locust_run_counts_with_the_tokenizer(start_simulator, tmp_path, tokenizer_json):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth_path, reasoning_tokens=2, **SIM)
    p = run_locust(locust_args(sim.url, tmp_path, "--no-usage", "--tokenizer", str(tokenizer_json)))
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    ok = [r for r in read_records(tmp_path / "out") if r["ok"]]
    assert len(ok) >= 10
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=len(ok))}
    for r in ok:
        n = truth[r["response_id"]]["output_tokens"]
        # both counts are kept: the tokenizer's re-count (not this model's tokenizer: wrong) ...
        assert r["tokenizer_output_tokens"] == count(tokenizer_json, sim_text(n)) != n
        # ... and the chunk count, which is exact here (one token per chunk)
        assert (r["output_tokens"] if r["output_tokens_source"] == "chunks" else r["client_output_tokens"]) == n
    # The tokenizer is trusted until requests that ran to max_tokens (finish_reason: length) show
    # which count is exact; then the chunk count wins, and meta.json says so.
    by_time = sorted(ok, key=lambda r: r["sent_unix"])
    assert by_time[0]["output_tokens_source"] == "tokenizer"
    assert by_time[-1]["output_tokens_source"] == "chunks" and by_time[-1]["finish_reason"] == "length"
    meta = orjson.loads((tmp_path / "out" / "meta.json").read_bytes())
    assert str(tokenizer_json) in meta_text(meta)  # the run says which tokenizer counted
    counting = meta["token_counting"]
    assert counting["trusted"] == "chunks"
    assert counting["disagree_over_10pct"] > 0.9 * counting["records_with_both_counts"]  # cancelled ones may agree
    assert counting["chunks_exact_at_length"] == counting["length_finished"] > counting["tokenizer_exact_at_length"]


def meta_text(meta: dict) -> str:
    return orjson.dumps(meta).decode()


@pytest.mark.slow  # a real locust process
def test_locust_run_with_usage_keeps_usage(start_simulator, tmp_path, tokenizer_json):
    sim = start_simulator(**SIM)
    p = run_locust(locust_args(sim.url, tmp_path, "--tokenizer", str(tokenizer_json)))
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    ok = [r for r in read_records(tmp_path / "out") if r["ok"]]
    assert len(ok) >= 10
    assert all(r["output_tokens_source"] == "usage" and r["output_tokens"] == 16 for r in ok)


@pytest.mark.slow  # a real locust process
@pytest.mark.parametrize("bad", ["missing", "garbage"])
def test_bad_tokenizer_path_exits_2_with_one_line(start_simulator, tmp_path, bad):
    sim = start_simulator(**SIM)
    path = tmp_path / f"{bad}.json"
    if bad == "garbage":
        path.write_text("{\"model\": 42}")
    p = run_locust(locust_args(sim.url, tmp_path, "--tokenizer", str(path)), timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "--tokenizer" in ln]
    assert len(lines) == 1 and str(path) in lines[0], p.stderr[-2000:]


@pytest.mark.parametrize("stream", [True, False])
def test_failed_request_counts_like_without_a_tokenizer(fake_llm, tmp_path, tokenizer_json, stream):
    r = local_user(fake_llm, tmp_path, model="http-500", max_tokens=12, stream=stream, usage=False,
                   tokenizer=str(tokenizer_json)).call()
    assert r.error_kind == "http_5xx"
    # streamed: 0 tokens from the tokenizer (was 0 chunks); non-streamed: no count at all, as before
    assert (r.output_tokens, r.output_tokens_source) == ((0, "tokenizer") if stream else (None, None))
