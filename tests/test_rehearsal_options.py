"""Scenario → plugin options: the flags `capacity run` passes and the in-place fill that plain
`locust --scenario` uses must both reach LLMOptions unchanged (guards drift between the modules)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from capacity_plugins.options import LLMOptions, add_arguments
from capacity_plugins.rehearsal import _option_defaults, fill_options, scenario_cli_args, scenario_options
from capacity_plugins.scenario import load_scenario


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()

    class Shim:
        def add_argument(self, *a, **kw):
            for k in ("include_in_web_ui", "is_secret", "is_required", "is_multiple", "env_var"):
                kw.pop(k, None)
            p.add_argument(*a, **kw)

    add_arguments(Shim())
    return p


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CAP_TEST_KEY", "sk-test")
    p = tmp_path / "s.yaml"
    p.write_text(
        "target: {url: 'http://127.0.0.1:9', dialect: tgi, model: m1, api_key_env: CAP_TEST_KEY, headers: {X-A: b}, insecure: true}\n"
        "corpus: {path: 'builtin:long', min_distinct: 30, sampling: sequential, seed: 9}\n"
        "request: {max_tokens: 77, stream: false, temperature: 0.2, top_p: 0.9, timeout_s: 45, ignore_eos: true, usage: false, retries: 2}\n"
    )
    return load_scenario(p)


def expected(s) -> dict:
    return {
        "dialect": "tgi", "model": "m1", "corpus": "builtin:long", "min_distinct": 30, "sampling": "sequential", "seed": 9,
        "max_tokens": 77, "stream": False, "temperature": 0.2, "top_p": 0.9, "request_timeout_s": 45.0,
        "ignore_eos": True, "include_usage": False, "retries": 2, "api_key_env": "CAP_TEST_KEY",
        "headers": {"X-A": "b"}, "insecure": True,
    }


def check(opts: LLMOptions, want: dict) -> None:
    got = {k: getattr(opts, k) for k in want}
    assert got == want


def test_cli_flags_reach_llm_options(scenario):
    ns = parser().parse_args(scenario_cli_args(scenario))
    check(LLMOptions.from_parsed(ns), expected(scenario))


def test_in_place_fill_respects_explicit_flags(scenario):
    defaults = _option_defaults()
    ns = SimpleNamespace(**defaults)
    ns.max_tokens = 5  # given on the command line: wins over the scenario
    fill_options(ns, scenario)
    want = expected(scenario) | {"max_tokens": 5}
    check(LLMOptions.from_parsed(ns), want)
    assert set(scenario_options(scenario)) <= set(defaults)  # every mapped option exists in the plugin
    assert Path(ns.results_dir).parent == Path(scenario.output)  # a folder of its own under output/
