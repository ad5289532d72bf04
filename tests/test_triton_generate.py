"""triton-generate end to end: options and scenario keys, the preflight, and real requests to the
embedded simulator's Triton framing (deltas and cumulative outputs, the model's own field names),
checked against the simulator's truth log; then a real Locust run and a `capacity run` of
scenarios/triton.yaml.

Triton reports no token counts, so every record here counts chunks (or the test's tokenizer):
the simulator writes one token per event unless told otherwise, so the chunk count is exact.
"""

from __future__ import annotations

import argparse
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from helpers.paths import ROOT
from helpers.processes import capacity, run_locust
from helpers.results import read_records, results_dir
from helpers.scenarios import write_corpus
from helpers.tokenizer import make_tokenizer, sim_text
from locust.env import Environment
from locust.event import Events
from tokenizers import Tokenizer

from capacity_plugins import plugin
from capacity_plugins.client.client import LLMClient
from capacity_plugins.client.options import overridden, shown
from capacity_plugins.client.users import LLMUser
from capacity_plugins.contracts.dialects import TritonFields
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.errors import RunError, UserError
from capacity_plugins.rehearsal.source import RequestSource
from capacity_plugins.runner.preflight import preflight
from capacity_plugins.scenario import load_scenario
from capacity_plugins.scenario.files import parse_scenario
from capacity_plugins.simulator.truth import read_truth

MAX_TOKENS = 12
# A model that names its fields its own way (the simulator serves it so), sampling settings in `parameters`.
CUSTOM = {"triton_input_field": "prompt", "triton_max_tokens_field": "max_new_tokens",
          "triton_output_field": "generated_text"}


def sim_config(**extra: Any) -> dict[str, Any]:
    # a decode step of ~9 ms: output events are well apart, the stream is read as it comes
    return dict(decode_base_ms=8.0, decode_per_seq_ms=0.5, force_max_tokens=True, **extra)


# -- options and scenario --------------------------------------------------------------------------


def test_flags_reach_the_options_and_bad_ones_name_their_flag():
    ns = SimpleNamespace(dialect="triton-generate", model="ensemble", triton_input_field="prompt",
                         triton_params_in="parameters", triton_outputs="cumulative")
    opts = overridden(LLMOptions(), ns)
    assert opts.triton == TritonFields(input_field="prompt", params_in="parameters", outputs="cumulative")
    # what a master sends its workers reads back the same
    assert LLMOptions.from_message(opts.to_message()) == opts
    with pytest.raises(UserError, match=r"^--triton-max-tokens-field: must differ from input_field"):
        overridden(LLMOptions(), SimpleNamespace(dialect="triton-generate", model="m", triton_max_tokens_field="text_input"))
    with pytest.raises(UserError, match=r"^--triton-outputs: must be one of auto, delta, cumulative"):
        overridden(LLMOptions(), SimpleNamespace(dialect="triton-generate", model="m", triton_outputs="deltas"))
    with pytest.raises(UserError, match=r"^--model: dialect triton-generate needs the model name"):
        overridden(LLMOptions(), SimpleNamespace(dialect="triton-generate"))


def test_scenario_keys_reach_the_options(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("target:\n  url: http://127.0.0.1:9\n  dialect: triton-generate\n  model: ensemble\n"
                 "  triton: {output_field: OUTPUT_0, outputs: delta}\n")
    opts = load_scenario(p).options()
    assert opts.triton == TritonFields(output_field="OUTPUT_0", outputs="delta")
    # the flags show the scenario's values; reading them back changes nothing
    assert overridden(opts, SimpleNamespace(**shown(opts))) == opts


@pytest.mark.slow  # `capacity run`
@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("{url: embedded, dialect: triton-generate}", "t.yaml: target.model: dialect triton-generate needs the model"),
        ("{url: embedded, dialect: tgi, triton: {outputs: delta}}", "t.yaml: target.triton: settings for dialect"),
        ("{url: embedded, dialect: triton-generate, model: m, triton: {input_field: id}}",
         "t.yaml: target.triton.input_field: 'id' is a key the generate API itself uses"),
        ("{url: embedded, dialect: triton-generate, model: m, triton: {params_in: body}}",
         "t.yaml: target.triton.params_in: must be one of top, parameters"),
        ("{url: embedded, dialect: triton-generate, model: m, triton: {output: x}}",
         "t.yaml: target.triton.output: unknown key"),
    ],
)
def test_bad_triton_scenario_is_one_line_exit_2(tmp_path, target, says):
    p = tmp_path / "t.yaml"
    p.write_text(f"target: {target}\n")
    r = capacity("run", str(p), timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and says in lines[0], r.stderr


@pytest.mark.slow  # a real locust process
def test_locust_flag_error_is_one_line_exit_2(tmp_path):
    r = run_locust(["--headless", "-u", "1", "-t", "1s", "--host", "http://127.0.0.1:9", "--dialect", "triton-generate",
                    "--model", "m", "--triton-input-field", "stream", "--results-dir", str(tmp_path / "out")])
    assert r.returncode == 2, r.stderr[-2000:]
    assert "--triton-input-field: 'stream' is a key the generate API itself uses" in r.stderr
    assert "Traceback" not in r.stderr


# -- preflight -------------------------------------------------------------------------------------


def scenario_for(url: str, model: str = "sim-model", **triton: str):
    target: dict[str, Any] = {"url": url, "dialect": "triton-generate", "model": model}
    if triton:
        target["triton"] = triton
    return parse_scenario({"target": target}, where="t.yaml")


def test_preflight_checks_readiness_the_model_and_one_request_with_the_models_names(start_simulator):
    sim = start_simulator(triton_input_field="prompt", triton_output_field="generated_text")
    assert preflight(scenario_for(sim.url, input_field="prompt", output_field="generated_text"), sim.url) == "sim-model"
    with pytest.raises(RunError, match=r"GET /v2/models/no-such-model answered HTTP 404.*unknown model"):
        preflight(scenario_for(sim.url, model="no-such-model", input_field="prompt"), sim.url)
    # The model's input named wrong: the test request fails with Triton's own message.
    with pytest.raises(RunError, match=r"/v2/models/sim-model/generate answered HTTP 400.*missing required input"):
        preflight(scenario_for(sim.url), sim.url)


class _NotReady(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = b'{"error":"model ensemble is not ready"}' if self.path == "/v2/health/ready" else b"{}"
        self.send_response(503 if self.path == "/v2/health/ready" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_preflight_asks_readiness_first_and_stops_on_a_server_still_loading():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotReady)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(RunError, match=r"GET /v2/health/ready answered HTTP 503, not ready: .*not ready"):
            preflight(scenario_for(url), url)
        assert _NotReady.seen == ["/v2/health/ready"]  # nothing else asked of a server that is not ready
    finally:
        server.shutdown()
        server.server_close()


# -- requests against the simulator, compared with its truth log -----------------------------------


class _U(LLMUser):
    pass


def calls(sim_url: str, tmp_path: Path, n: int, **opts: Any):
    """n requests from one in-process user (the run's real context, dialect and reader)."""
    corpus = write_corpus(tmp_path / "c.jsonl", 20)
    ns = argparse.Namespace(dialect="triton-generate", model="sim-model", corpus=str(corpus), min_distinct=1,
                            max_tokens=MAX_TOKENS, results_dir=str(tmp_path / "out"), **opts)
    user_class = type("U", (_U,), {"host": sim_url})
    env = Environment(user_classes=[user_class], events=Events(), host=sim_url, parsed_options=ns)
    env.create_local_runner()
    plugin.register(env)
    source = RequestSource.of(env)
    source.sampler = source.corpus.sampler("sequential", 0, 0, 1)
    user = user_class(env)
    recs = [user.call(source.next_sample()) for _ in range(n)]
    LLMClient.of(env).records.close()
    return recs


@pytest.mark.parametrize("cumulative", [False, True], ids=["deltas", "cumulative"])
@pytest.mark.parametrize("outputs", ["auto", "told"])
@pytest.mark.parametrize("names", ["default", "custom"])
def test_records_match_the_servers_truth(start_simulator, tmp_path, cumulative, outputs, names):
    truth_path = tmp_path / "truth.jsonl"
    custom = names == "custom"
    sim = start_simulator(truth_log=truth_path, triton_cumulative=cumulative,
                          **(CUSTOM if custom else {}), **sim_config())
    opts: dict[str, Any] = dict(CUSTOM, triton_params_in="parameters") if custom else {}
    opts["triton_outputs"] = ("cumulative" if cumulative else "delta") if outputs == "told" else "auto"
    recs = calls(sim.url, tmp_path, 4, **opts)
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=4)}
    for r in recs:
        assert r.ok, r.error
        t = truth[r.response_id]  # Triton sends no id; the simulator's x-request-id joins
        assert t["dialect"] == "triton" and t["stream"] is True
        # one output event per token written, counted whether each event is the delta or the whole text
        assert r.output_tokens == t["output_tokens"] == MAX_TOKENS and r.output_tokens_source == "chunks"
        assert len(r.itl_ms) == len(t["token_times_s"]) - 1 == MAX_TOKENS - 1
        # the client cannot read the first token before the server wrote it
        assert r.ttft_ms >= t["first_token_s"] * 1000.0 - 0.5
        assert r.first_visible_ms == r.ttft_ms and r.finish_reason is None


def test_non_streamed_generate(start_simulator, tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth_path, **sim_config())
    recs = calls(sim.url, tmp_path, 2, stream=False)
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=2)}
    for r in recs:
        assert r.ok and not r.stream and r.ttft_ms is None, r.error
        assert truth[r.response_id]["stream"] is False  # /generate, not the stream
        assert r.output_tokens is None  # no usage, no chunks, no tokenizer: no count (docs/metrics.md)


@pytest.mark.parametrize("cumulative", [False, True], ids=["deltas", "cumulative"])
def test_a_tokenizer_counts_the_generated_text_once(start_simulator, tmp_path, cumulative):
    # Cumulative events repeat the text so far: only the last one is the generated text.
    tok = make_tokenizer(tmp_path / "tokenizer.json")
    sim = start_simulator(triton_cumulative=cumulative, **sim_config())
    expected = len(Tokenizer.from_file(str(tok)).encode(sim_text(MAX_TOKENS), add_special_tokens=False).ids)
    assert expected != MAX_TOKENS  # the test tokenizer splits the simulator's words
    for r in calls(sim.url, tmp_path, 2, tokenizer=str(tok)):
        assert r.ok, r.error
        assert r.tokenizer_output_tokens == expected and r.output_tokens_source == "tokenizer"
        assert r.client_output_tokens == MAX_TOKENS


def test_in_stream_error_cut_and_malformed_events(start_simulator, tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth_path, seed=3, stream_error_prob=0.3, disconnect_prob=0.3,
                          malformed_prob=0.3, **sim_config())
    recs = calls(sim.url, tmp_path, 16)
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=16)}
    kinds = {r.error_kind for r in recs}
    assert {"server_error", "stream_cut", "malformed", None} <= kinds, kinds
    for r in recs:
        told = truth[r.response_id]["error_kind"]
        if r.error_kind == "malformed":
            # The user hangs up at the bad event; the simulator then logs the rest as `cancelled`
            # (unless it had already finished): it logs `malformed` only for a body read to its end.
            assert told in ("malformed", "cancelled"), (r.error, told)
        else:
            assert r.error_kind == told, (r.error, truth[r.response_id])


# -- a real Locust run and a capacity run ----------------------------------------------------------


@pytest.mark.slow  # a real locust process
def test_locust_run_cumulative_outputs_against_the_truth(start_simulator, tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth_path, triton_cumulative=True, **CUSTOM, **sim_config())
    corpus = write_corpus(tmp_path / "c.jsonl", 1200)
    out = tmp_path / "out"
    p = run_locust(["--headless", "-u", "2", "-r", "2", "-t", "4s", "--host", sim.url, "--dialect", "triton-generate",
                    "--model", "sim-model", "--triton-input-field", "prompt", "--triton-max-tokens-field",
                    "max_new_tokens", "--triton-output-field", "generated_text", "--triton-params-in", "parameters",
                    "--corpus", str(corpus), "--min-distinct", "1000", "--max-tokens", str(MAX_TOKENS),
                    "--results-dir", str(out), "--only-summary"])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    recs = read_records(out)
    ok = [r for r in recs if r["ok"]]
    # every request ends ok but those the stop cancelled (Locust stops users mid-request)
    assert len(ok) >= 10 and {r["error_kind"] for r in recs} <= {None, "cancelled"}
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=len(ok))}
    diffs = []
    for r in ok:
        t = truth[r["response_id"]]
        assert r["output_tokens"] == t["output_tokens"] == MAX_TOKENS and r["output_tokens_source"] == "chunks"
        assert len(r["itl_ms"]) == MAX_TOKENS - 1
        diffs.append(r["ttft_ms"] - t["first_token_s"] * 1000.0)
    print(f"TTFT client-server: median {statistics.median(diffs):.3f} ms, p99 {quantile(diffs, 0.99):.3f} ms "
          f"(n={len(diffs)})")
    assert min(diffs) > -0.5  # never before the server wrote it
    # The systematic offset (loopback, reading, parsing): test_accuracy.py's bound. Its tail is the
    # shared machine's scheduling, not the dialect: printed, not judged, with this few requests.
    assert statistics.median(diffs) <= 1.0


@pytest.mark.background  # waits on its processes, asserts no timing (tests/README.md)
@pytest.mark.slow
def test_capacity_run_of_the_shipped_triton_scenario(tmp_path, monkeypatch):
    # The shipped file's target and request settings, aimed at the embedded simulator serving
    # the same model name with cumulative outputs; a two-step sweep instead of the long one.
    data = yaml.safe_load((ROOT / "scenarios" / "triton.yaml").read_text())
    assert data["target"]["dialect"] == "triton-generate"
    data["target"]["url"] = "embedded"
    data["target"]["simulator"] = {"model": "${TRITON_MODEL}", "max_num_seqs": 4, "triton_cumulative": True}
    monkeypatch.setenv("TRITON_MODEL", "ensemble")
    data["request"].update(max_tokens=MAX_TOKENS, timeout_s=10)
    data["load"] = {"kind": "concurrency_sweep", "levels": [1, 4], "step_s": 3, "warmup_s": 1}
    data["telemetry"] = {"scrape": [], "nvml": False}
    data["corpus"] = {"min_distinct": 10}
    data["output"] = str(tmp_path / "results")
    sc = tmp_path / "triton.yaml"
    sc.write_text(yaml.safe_dump(data))
    # Not analysed: whether two 3-second steps on a shared machine make a decision is the
    # analysis's question (exit 1 when no step is valid), not this dialect's.
    r = capacity("run", str(sc), "--no-analyze", timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "preflight ok" in r.stdout and "serves ensemble" in r.stdout
    folder = results_dir(r.stdout)
    recs = [x for x in read_records(folder) if x["error_kind"] != "cancelled"]
    truth = {t["id"]: t for t in read_truth(folder / "simulator_truth.jsonl", min_rows=len(recs))}
    assert recs and all(x["ok"] for x in recs)
    for x in recs:
        t = truth[x["response_id"]]
        # lengths the simulator drew (no ignore_eos in the shipped file), counted one event per token
        assert x["output_tokens"] == t["output_tokens"] <= MAX_TOKENS
        assert x["ttft_ms"] >= t["first_token_s"] * 1000.0 - 0.5
    assert {x["step"] for x in recs} == {0, 1}
    assert (folder / "steps.json").exists()
