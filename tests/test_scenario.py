"""Scenario files: defaults, env expansion, redaction, and one-line errors naming file and field."""

from __future__ import annotations

import pytest
from helpers.paths import ROOT
from helpers.processes import capacity
from helpers.scenarios import scenario_error, write_yaml

from capacity_plugins.scenario import (
    ConcurrencySweepLoad,
    PeakLoad,
    RateSweepLoad,
    load_scenario,
)

write = write_yaml  # short names: every test here writes one
err = scenario_error


def test_minimal_scenario_gets_defaults(tmp_path):
    s = load_scenario(write(tmp_path, "target: {url: 'http://127.0.0.1:8000/'}\n"))
    assert s.target.url == "http://127.0.0.1:8000"
    assert isinstance(s.load, ConcurrencySweepLoad)
    assert s.load.levels == [1, 2, 4, 8, 16]
    assert s.request.max_tokens == 128 and s.corpus.path == "builtin"
    assert s.slo.attainment == 0.95
    assert s.drain_timeout_s == s.request.timeout_s
    assert not s.open_loop


def test_rate_sweep_accepts_fractional_levels(tmp_path):
    s = load_scenario(
        write(tmp_path, "target: {url: embedded}\nload: {kind: rate_sweep, levels: [0.5, 1.25, 3], arrival: gamma, cv: 2}\n")
    )
    assert isinstance(s.load, RateSweepLoad)
    assert s.load.levels == [0.5, 1.25, 3.0]
    assert s.open_loop


def test_peak_defaults_to_forecast_times_safety(tmp_path):
    s = load_scenario(
        write(tmp_path, "target: {url: embedded}\nload: {kind: peak, ramp_s: 5, hold_s: 10}\ncapacity: {peak_qps: 4, safety_factor: 1.5}\n")
    )
    assert isinstance(s.load, PeakLoad)
    assert s.peak_rps == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("target: {url: embedded}\nload: {kind: rate_sweep, levels: [1, 2, -3]}\n", "s.yaml: load.levels[2]: "),
        ("target: {url: embedded}\nload: {levels: [1, 2.5]}\n", "s.yaml: load.levels[1]: "),
        ("target: {url: embedded}\nload: {levels: [1], arrival: poisson}\n", "load.arrival: unknown key for load kind concurrency_sweep"),
        ("target: {url: embedded}\nrequest: {max_tokenz: 3}\n", "s.yaml: request.max_tokenz: unknown key"),
        ("target: {url: embedded}\nrequest: {max_tokens: lots}\n", "s.yaml: request.max_tokens: "),
        ("target: {url: 'ftp://x'}\n", "s.yaml: target.url: 'ftp://x' is not an http(s)"),
        ("target: {url: 'http://host:99999'}\n", "s.yaml: target.url: "),
        ("target: {url: embedded}\nload: {kind: wave}\n", "s.yaml: load: kind must be one of"),
        ("target: {url: embedded}\nload: {kind: peak}\n", "needs target_rps, users, or capacity.peak_qps"),
        ("target: {url: embedded}\nload: {step_s: 5, warmup_s: 5}\n", "warmup_s (5) must be shorter than step_s (5)"),
        ("target: {url: embedded}\ncorpus: {path: missing.jsonl}\n", "s.yaml: corpus.path: file not found"),
        ("target: {url: 'http://x', simulator: {max_num_seqs: 8}}\n", "target: simulator settings are only used with url: embedded"),
        ("load: {levels: [1]}\n", "s.yaml: target: Field required"),
        ("target: {url: '${NO_SUCH_VAR_FOR_TEST}'}\n", "s.yaml: target.url: environment variable NO_SUCH_VAR_FOR_TEST is not set"),
        ("target: {url: embedded, api_key_env: 'sk-live-123'}\n", "target.api_key_env: must be the NAME"),
        ("- just\n- a list\n", "must be a mapping"),
        ("", "empty"),
    ],
)
def test_bad_fields_name_file_and_path(tmp_path, text, expected):
    assert expected in err(tmp_path, text)


def test_yaml_syntax_error_names_line(tmp_path):
    msg = err(tmp_path, "target:\n  url: embedded\n load: [\n")
    assert msg.startswith(f"{tmp_path / 's.yaml'}:3: YAML syntax error")


def test_env_expansion_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("CAP_TEST_URL", "http://127.0.0.1:9000")
    s = load_scenario(write(tmp_path, "target: {url: '${CAP_TEST_URL}', model: '${CAP_TEST_MODEL:-llama}'}\n"))
    assert s.target.url == "http://127.0.0.1:9000" and s.target.model == "llama"


def test_corpus_path_relative_to_scenario_file(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    s = load_scenario(write(tmp_path, "target: {url: embedded}\ncorpus: {path: data/p.jsonl}\n"))
    assert s.corpus_path() == str((tmp_path / "data" / "p.jsonl").resolve())
    assert load_scenario(write(tmp_path, "target: {url: embedded}\ncorpus: {path: 'builtin:long'}\n")).corpus_path() == "builtin:long"


def test_resolved_yaml_redacts_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("CAP_TEST_TOKEN", "tok-very-secret")
    monkeypatch.setenv("CAP_TEST_API_KEY", "sk-also-secret")
    monkeypatch.setenv("CAP_TEST_ORG", "acme")
    s = load_scenario(
        write(
            tmp_path,
            "target:\n  url: 'http://user:pw-secret@127.0.0.1:8000'\n  api_key_env: CAP_TEST_API_KEY\n"
            "  headers: {Authorization: 'Bearer ${CAP_TEST_TOKEN}', X-Org: '${CAP_TEST_ORG}', X-Note: 'k=${CAP_TEST_TOKEN}'}\n",
        )
    )
    out = s.resolved_yaml()
    for secret in ("tok-very-secret", "sk-also-secret", "pw-secret"):
        assert secret not in out
    assert "CAP_TEST_API_KEY" in out and "acme" in out
    # The redacted copy is itself a valid scenario (capacity analyze reads it back).
    again = load_scenario(write(tmp_path, out, "copy.yaml"))
    assert again.load == s.load and again.slo == s.slo


def test_every_shipped_scenario_loads(monkeypatch):
    for var in ("VLLM_URL", "TGI_URL", "OLLAMA_URL", "VLLM_MODEL", "OPENAI_API_KEY", "TRITON_URL", "TRITON_MODEL",
                "TRITON_METRICS_URL"):
        monkeypatch.setenv(var, "http://127.0.0.1:8000" if var.endswith("URL") else "x")
    # matrix-*.yaml are `capacity matrix` files, not scenarios (tests/test_matrix_spec.py loads them)
    files = sorted(f for f in (ROOT / "scenarios").glob("*.yaml") if not f.name.startswith("matrix-"))
    names = {f.stem for f in files}
    assert {"quickstart", "concurrency_sweep", "rate_sweep", "peak", "long_context", "soak", "vllm", "tgi", "ollama",
            "triton", "capacity_search", "cache_probe", "workload_classes"} <= names
    for f in files:
        load_scenario(f)


def _run_refused(tmp_path, text: str) -> str:
    """`capacity run` of a bad scenario: exit 2 and one line, no traceback; returns the line."""
    bad = write(tmp_path, text, "bad.yaml")
    r = capacity("run", str(bad), timeout=60)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.slow  # `capacity run`
def test_cli_bad_scenario_one_line_exit_2(tmp_path):
    line = _run_refused(tmp_path, "target: {url: embedded}\nload: {kind: rate_sweep, levels: [1, x]}\n")
    assert "bad.yaml: load.levels[1]" in line


# Observation 10 of issue 25: an unknown key at any depth names the key it is closest to.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("target: {url: embedded}\nlaod: {levels: [1]}\n", "s.yaml: laod: unknown key (did you mean load?)"),
        ("target: {url: embedded}\nload: {levels: [1], step_secs: 20}\n",
         "s.yaml: load.step_secs: unknown key for load kind concurrency_sweep (did you mean step_s?)"),
        ("target: {url: embedded}\nload: {kind: rate_sweep, levels: [1], arival: poisson}\n",
         "s.yaml: load.arival: unknown key for load kind rate_sweep (did you mean arrival?)"),
        ("target: {url: embedded}\ncapacity: {peak_qsp: 20}\n", "s.yaml: capacity.peak_qsp: unknown key (did you mean peak_qps?)"),
        ("target: {url: embedded}\nslo: {ttft_p59_ms: 20}\n", "s.yaml: slo.ttft_p59_ms: unknown key (did you mean ttft_p95_ms?)"),
        ("target: {url: embedded}\nverdict: {gpu_busy_pc: 80}\n", "s.yaml: verdict.gpu_busy_pc: unknown key (did you mean gpu_busy_pct?)"),
        ("target: {url: embedded, simulator: {max_num_seq: 8}}\n",
         "s.yaml: target.simulator.max_num_seq: unknown simulator setting (did you mean max_num_seqs?)"),
        ("target: {url: embedded, triton: {input_feild: x}, dialect: triton-generate, model: m}\n",
         "s.yaml: target.triton.input_feild: unknown key (did you mean input_field?)"),
        ("target: {url: embedded}\ntelemetry: {scrape: [{url: 'http://h:1', knd: dcgm}]}\n",
         "s.yaml: telemetry.scrape[0].knd: unknown key (did you mean kind?)"),
        ("target: {url: embedded}\nworkloads:\n  - {name: chat, wieght: 2}\n",
         "s.yaml: workloads[0].wieght: unknown key (did you mean weight?)"),
        ("target: {url: embedded}\nworkloads:\n  - {name: chat, request: {max_tokns: 3}}\n",
         "s.yaml: workloads[0].request.max_tokns: unknown key (did you mean max_tokens?)"),
        # The typo comes first, not the field it left missing.
        ("target: {urll: embedded}\n", "s.yaml: target.urll: unknown key (did you mean url?)"),
    ],
)
def test_unknown_key_at_any_depth_says_did_you_mean(tmp_path, text, expected):
    assert expected in err(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [
        "target: {url: embedded}\nzzzzzz: 1\n",
        "target: {url: embedded}\nload: {levels: [1], qqqq: 20}\n",
        "target: {url: embedded, simulator: {qqqq: 8}}\n",
        # Not part of the file (set by the loader): never suggested.
        "target: {url: embedded}\nsource_pth: x\n",
    ],
)
def test_unknown_key_with_nothing_close_suggests_nothing(tmp_path, text):
    msg = err(tmp_path, text)
    assert "unknown" in msg and "did you mean" not in msg


@pytest.mark.slow  # `capacity run`
def test_cli_nested_typo_is_one_line_with_the_suggestion(tmp_path):
    line = _run_refused(tmp_path, "target: {url: embedded}\nload: {levels: [1], step_secs: 20}\n")
    assert line.endswith("bad.yaml: load.step_secs: unknown key for load kind concurrency_sweep (did you mean step_s?)")
