"""One configuration path: a scenario's values become the Locust parser's defaults, a typed flag
wins, the worker message round-trips, and `capacity run` hands the child only the scenario plus
what it decided itself."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from locust.argument_parser import get_parser

from capacity_plugins.client.options import LLMOptions
from capacity_plugins.plugin import install
from capacity_plugins.runner import build_parser, locust_command
from capacity_plugins.scenario import load_scenario


@pytest.fixture
def scenario_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CAP_TEST_KEY", "sk-test-123456")
    p = tmp_path / "s.yaml"
    p.write_text(
        "target: {url: 'http://127.0.0.1:9', dialect: tgi, model: m1, api_key_env: CAP_TEST_KEY, headers: {X-A: b}, insecure: true}\n"
        "corpus: {path: 'builtin:long', min_distinct: 30, sampling: sequential, seed: 9}\n"
        "request: {max_tokens: 77, stream: false, temperature: 0.2, top_p: 0.9, timeout_s: 45, ignore_eos: true, usage: false, retries: 2}\n"
    )
    return p


def parse(monkeypatch, *argv: str) -> argparse.Namespace:
    """Locust's own parser with the plugin's listeners, as a real `locust` process builds it
    (the plugin reads --scenario from the process's command line, so set sys.argv too)."""
    install()
    monkeypatch.setattr(sys, "argv", ["locust", *argv])
    return get_parser().parse_args(list(argv))


EXPECTED = {
    "dialect": "tgi", "model": "m1", "corpus": "builtin:long", "min_distinct": 30, "sampling": "sequential", "seed": 9,
    "max_tokens": 77, "stream": False, "temperature": 0.2, "top_p": 0.9, "request_timeout_s": 45.0,
    "ignore_eos": True, "include_usage": False, "retries": 2, "api_key_env": "CAP_TEST_KEY",
    "headers": {"X-A": "b"}, "insecure": True,
}


def fields(opts: LLMOptions) -> dict:
    return {k: getattr(opts, k) for k in EXPECTED}


def test_scenario_values_are_the_parsers_defaults(scenario_file, monkeypatch):
    ns = parse(monkeypatch, "--scenario", str(scenario_file))
    assert fields(LLMOptions.from_parsed(ns)) == EXPECTED
    assert LLMOptions.from_parsed(ns) == LLMOptions.from_scenario(load_scenario(scenario_file))
    assert ns.host == "http://127.0.0.1:9"  # target.url, unless --host is given


def test_a_typed_flag_wins_over_the_scenario(scenario_file, monkeypatch):
    ns = parse(monkeypatch, "--max-tokens", "5", "--scenario", str(scenario_file), "--host", "http://h:1",
               "--header", "X-B:c")
    got = fields(LLMOptions.from_parsed(ns))
    assert got == EXPECTED | {"max_tokens": 5, "headers": {"X-A": "b", "X-B": "c"}}
    assert ns.host == "http://h:1"


def test_without_a_scenario_the_builtin_defaults_hold(monkeypatch):
    ns = parse(monkeypatch, "--max-tokens", "9")
    assert LLMOptions.from_parsed(ns) == LLMOptions(max_tokens=9)


def test_worker_message_round_trips(scenario_file):
    opts = LLMOptions.from_scenario(load_scenario(scenario_file))
    assert LLMOptions.from_message(opts.to_message()) == opts


def test_run_hands_the_child_only_the_scenario_and_its_own_decisions(scenario_file, tmp_path):
    s = load_scenario(scenario_file)
    args = build_parser().parse_args([str(scenario_file)])
    cmd = locust_command(s, args, "http://127.0.0.1:9", "m1", tmp_path / "out")
    assert cmd[cmd.index("--scenario") + 1] == str(scenario_file.resolve())
    for flag in ("--max-tokens", "--dialect", "--corpus", "--temperature", "--header", "--model"):
        assert flag not in cmd  # the child reads these from the scenario itself
    cmd = locust_command(s, args, "http://127.0.0.1:9", "found-by-preflight", tmp_path / "out")
    assert cmd[cmd.index("--model") + 1] == "found-by-preflight"
