"""One configuration path: a scenario is parsed into typed options once, only what someone typed
replaces a field of them, the worker receives them as they are, and `capacity run` hands the
child only the scenario plus what it decided itself. One name per option (field, scenario key,
flag) and one default per value."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT
from locust.argument_parser import get_parser
from locust.rpc.protocol import Message

from capacity_plugins.client.options import FLAGS, TRITON_FLAGS, overridden, shown
from capacity_plugins.contracts.dialects import TRITON_KEYS, TritonFields
from capacity_plugins.contracts.options import REHEARSAL, SCENARIO_KEYS, LLMOptions, flag
from capacity_plugins.dialects import RequestParams, get_dialect
from capacity_plugins.errors import UserError
from capacity_plugins.plugin import install
from capacity_plugins.runner import build_parser, locust_command
from capacity_plugins.scenario import Scenario, load_scenario
from capacity_plugins.swarm.messages import Setup

SCENARIO = (
    "target: {url: 'http://127.0.0.1:9', dialect: tgi, model: m1, api_key_env: CAP_TEST_KEY, headers: {X-A: b}, insecure: true}\n"
    "corpus: {path: 'builtin:long', min_distinct: 30, sampling: sequential, seed: 9}\n"
    "request: {max_tokens: 77, stream: false, temperature: 0.2, top_p: 0.9, timeout_s: 45, ignore_eos: true, usage: false, retries: 2}\n"
)


@pytest.fixture
def scenario_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CAP_TEST_KEY", "sk-test-123456")
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO)
    return p


def parse(monkeypatch, *argv: str) -> argparse.Namespace:
    """Locust's own parser with the plugin's listeners, as a real `locust` process builds it
    (the plugin reads --scenario from the process's command line, so set sys.argv too)."""
    install()
    monkeypatch.setattr(sys, "argv", ["locust", *argv])
    return get_parser().parse_args(list(argv))


EXPECTED = {
    "dialect": "tgi", "model": "m1", "corpus": "builtin:long", "min_distinct": 30, "sampling": "sequential", "seed": 9,
    "max_tokens": 77, "stream": False, "temperature": 0.2, "top_p": 0.9, "timeout_s": 45.0,
    "ignore_eos": True, "usage": False, "retries": 2, "api_key_env": "CAP_TEST_KEY",
    "headers": {"X-A": "b"}, "insecure": True,
}


def fields(opts: LLMOptions) -> dict:
    return {k: getattr(opts, k) for k in EXPECTED}


def test_scenario_values_are_the_parsers_defaults(scenario_file, monkeypatch):
    ns = parse(monkeypatch, "--scenario", str(scenario_file))
    base = load_scenario(scenario_file).options()
    assert fields(base) == EXPECTED
    # the flags show the scenario's values (the web UI form), and nothing typed: the scenario's own object
    assert {dest: getattr(ns, dest) for dest in shown(base)} == shown(base)
    assert overridden(base, ns) is base
    assert ns.host == "http://127.0.0.1:9"  # target.url, unless --host is given


def test_a_typed_flag_wins_over_the_scenario(scenario_file, monkeypatch):
    ns = parse(monkeypatch, "--max-tokens", "5", "--scenario", str(scenario_file), "--host", "http://h:1",
               "--headers", "X-B:c")
    got = fields(overridden(load_scenario(scenario_file).options(), ns))
    assert got == EXPECTED | {"max_tokens": 5, "headers": {"X-A": "b", "X-B": "c"}}
    assert ns.host == "http://h:1"


def test_without_a_scenario_the_builtin_defaults_hold(monkeypatch):
    ns = parse(monkeypatch, "--max-tokens", "9")
    assert overridden(LLMOptions(), ns) == LLMOptions(max_tokens=9)


def test_the_old_spellings_still_work(monkeypatch):
    old = parse(monkeypatch, "--request-timeout", "7", "--no-stream", "--no-usage", "--header", "A:b")
    new = parse(monkeypatch, "--timeout-s", "7", "--no-stream", "--no-usage", "--headers", "A:b")
    assert overridden(LLMOptions(), old) == overridden(LLMOptions(), new) == LLMOptions(
        timeout_s=7.0, stream=False, usage=False, headers={"A": "b"})
    # and the on side of an on/off flag turns a scenario's `false` back on
    assert overridden(dataclasses.replace(LLMOptions(), stream=False), parse(monkeypatch, "--stream")).stream is True


def _scenario_field(model: type, path: str) -> object:
    """The pydantic field a dotted scenario key names (AssertionError when there is none)."""
    field = None
    for part in path.split("."):
        assert part in model.model_fields, f"{path}: no key {part!r}"
        field = model.model_fields[part]
        inner = [a for a in getattr(field.annotation, "__args__", ()) if hasattr(a, "model_fields")]
        model = inner[0] if inner else field.annotation
    return field


def test_every_option_has_one_name_for_its_field_key_and_flag(scenario_file, monkeypatch):
    names = [f.name for f in dataclasses.fields(LLMOptions)]
    assert list(FLAGS) == names and list(SCENARIO_KEYS) == names
    install()
    monkeypatch.setattr(sys, "argv", ["locust"])
    parser = get_parser()
    dests = {a.dest: a for a in parser._actions}
    for name in names:
        if name == "triton":  # its fields, each under triton_<key> / --triton-<key>
            assert list(TRITON_FLAGS) == list(TRITON_KEYS)
            for key in TRITON_KEYS:
                assert dests[f"triton_{key}"].option_strings[0] == flag(f"triton_{key}")
            continue
        # the flag is the field's name; an old spelling may follow it, never lead
        assert dests[name].option_strings[0] == flag(name), name
        key = SCENARIO_KEYS[name]
        if key is None:
            continue
        _scenario_field(Scenario, key)
        # the key ends in the field's name, but for the corpus: `corpus` names its section, `path` the spec
        assert key.rsplit(".", 1)[1] == name or (name, key) == ("corpus", "corpus.path"), (name, key)
    # and each key carries its value to its field
    raw = yaml.safe_load(SCENARIO)
    options = load_scenario(scenario_file).options()
    for name, expected in EXPECTED.items():
        section, key = SCENARIO_KEYS[name].split(".")
        assert raw[section][key] == expected == getattr(options, name), name


def test_one_default_per_value():
    # A scenario's defaults are the rehearsal's options, field by field: they cannot drift apart.
    s = load_scenario_text("target: {url: 'http://127.0.0.1:9'}\n")
    assert s.options() == REHEARSAL
    assert dataclasses.replace(LLMOptions(), temperature=0.7, top_p=1.0, timeout_s=60.0, seed=42) == REHEARSAL
    # ... and each default is written once: wherever the package states a default (a field's value,
    # `default=`, a parameter's default, `.get(key, default)`), these values appear only in contracts/options.py.
    distinctive = {LLMOptions().max_tokens, LLMOptions().timeout_s, LLMOptions().min_distinct, LLMOptions().corpus,
                   LLMOptions().sampling, LLMOptions().dialect, REHEARSAL.seed}
    assert distinctive == {128, 600.0, 1000, "builtin", "shuffle", "openai-chat", 42}
    found: dict[object, list[str]] = {v: [] for v in distinctive}
    for path in sorted((ROOT / "capacity_plugins").rglob("*.py")):
        for node in _defaults(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and type(node.value) in (int, float, str) and node.value in distinctive:
                found[node.value].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert all(p.startswith("capacity_plugins/contracts/options.py:") for ps in found.values() for p in ps), found
    assert len(found[128]) == 1 and len(found[600.0]) == 1, found  # max_tokens, timeout_s: one default each


def _defaults(tree: ast.AST):
    """The expressions a module states as defaults."""
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and node.value is not None or isinstance(node, ast.keyword) and node.arg == "default":
            yield node.value
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from node.args.defaults
            yield from (d for d in node.args.kw_defaults if d is not None)
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and (
                getattr(node.func, "attr", None) == "get" or getattr(node.func, "id", None) == "getattr"):
            yield node.args[-1]


def load_scenario_text(text: str) -> Scenario:
    from capacity_plugins.scenario import parse_scenario

    return parse_scenario(yaml.safe_load(text), "s.yaml")


def test_max_tokens_zero_means_no_limit_in_the_scenario_the_flag_and_a_class(monkeypatch):
    s = load_scenario_text("target: {url: 'http://127.0.0.1:9'}\nrequest: {max_tokens: 0}\n"
                           "workloads: [{name: chat, request: {max_tokens: 0}}]\n")
    assert s.options().max_tokens == 0 and s.workload_classes[0].request.max_tokens == 0
    assert overridden(LLMOptions(), parse(monkeypatch, "--max-tokens", "0")).max_tokens == 0
    sample = type("S", (), {"id": "p", "max_tokens": None, "text": "hi", "as_messages": lambda self: []})()
    for dialect in ("openai-chat", "tgi", "ollama"):
        call = get_dialect(dialect).build(sample, RequestParams(model="m", max_tokens=0))
        assert call.max_tokens is None and b"128" not in call.body and b'"max_tokens":0' not in call.body, call.body
    # below 0 is a mistake, named where it was made
    with pytest.raises(UserError, match=r"s\.yaml: request\.max_tokens: "):
        load_scenario_text("target: {url: 'http://127.0.0.1:9'}\nrequest: {max_tokens: -1}\n")
    with pytest.raises(UserError, match=r"^--max-tokens: must be >= 0, got -1"):
        overridden(LLMOptions(), parse(monkeypatch, "--max-tokens", "-1"))


def test_a_worker_receives_the_masters_typed_options(scenario_file):
    opts = dataclasses.replace(load_scenario(scenario_file).options(), results_dir=Path("/tmp/r"),
                               triton=TritonFields(output_field="OUT", outputs="delta"), temperature=None)
    setup = Setup(options=opts, sha256="x", shard_count=2)
    # through Locust's own wire format, as a worker receives it
    wire = Message.unserialize(Message(Setup.TYPE, setup.to_data(), "master").serialize())
    got = Setup.from_data(wire.data).options
    assert isinstance(got, LLMOptions) and got == opts


def test_run_hands_the_child_only_the_scenario_and_its_own_decisions(scenario_file, tmp_path):
    s = load_scenario(scenario_file)
    args = build_parser().parse_args([str(scenario_file)])
    cmd = locust_command(s, args, "http://127.0.0.1:9", "m1", tmp_path / "out")
    assert cmd[cmd.index("--scenario") + 1] == str(scenario_file.resolve())
    for name in ("--max-tokens", "--dialect", "--corpus", "--temperature", "--headers", "--header", "--model"):
        assert name not in cmd  # the child reads these from the scenario itself
    cmd = locust_command(s, args, "http://127.0.0.1:9", "found-by-preflight", tmp_path / "out")
    assert cmd[cmd.index("--model") + 1] == "found-by-preflight"
