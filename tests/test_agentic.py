"""Agentic sessions without Locust: the session script format (one-line errors), one session's
walk (history, tool waits, cuts), the OpenAI tool-call stream the simulator writes and the
client's parser reads back, and the shipped example scenario."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from helpers.paths import ROOT

from capacity_plugins.analysis.intervals import sessions_rate
from capacity_plugins.client.sessions import Answer, run_agentic
from capacity_plugins.corpus.agentic import SessionScript, read_sessions
from capacity_plugins.dialects import get_dialect
from capacity_plugins.dialects.base import RequestParams
from capacity_plugins.errors import UserError
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.openai_api import OpenAIDialect
from capacity_plugins.simulator.protocol import BadRequest

pytestmark = pytest.mark.cpu

SCRIPT = {"session_id": "s1", "turns": [
    {"role": "user", "tokens": 30},
    {"role": "assistant", "output_tokens": 6, "tool_calls": [{"name": "search"}]},
    {"role": "tool", "latency_s": 0.25, "result_tokens": 40},
    {"role": "assistant", "output_tokens": 8, "tool_calls": [{"name": "read"}, {"name": "test"}]},
    {"role": "tool", "latency_s": 0.1, "result_tokens": 10},
    {"role": "tool", "latency_s": {"dist": "uniform", "low": 0.2, "high": 0.2}, "content": "ok"},
    {"role": "assistant", "output_tokens": 5}]}


def _write(tmp_path: Path, *docs: object) -> Path:
    p = tmp_path / "s.jsonl"
    p.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs))
    return p


def test_a_script_reads_back_and_travels_as_a_message(tmp_path):
    [s] = read_sessions(_write(tmp_path, SCRIPT))
    assert s.session_id == "s1" and s.model_calls == 3
    assert [t.role for t in s.turns] == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]
    assert SessionScript.from_message(s.to_message()) == s


@pytest.mark.parametrize(("turns", "says"), [
    ([{"role": "user", "tokens": 3}], "at least one assistant turn"),
    ([{"role": "user", "tokens": 3}, {"role": "assistant", "output_tokens": 4, "tool_calls": [{"name": "x"}]}],
     "have no tool result"),
    ([{"role": "user", "tokens": 3}, {"role": "tool", "latency_s": 1, "result_tokens": 3}], "no tool call"),
    ([{"role": "user", "tokens": 3}, {"role": "assistant", "output_tokens": 0}], "turns[1]: output_tokens"),
    ([{"role": "user", "tokens": 3}, {"role": "assistant", "output_tokens": 4, "tool_calls": [{"name": "x"}]},
      {"role": "tool", "latency_s": {"dist": "gamma"}, "result_tokens": 3}], "turns[2]: latency_s"),
    ([{"role": "system", "content": "x"}], "role must be user, assistant or tool"),
])
def test_a_bad_script_is_one_line_naming_file_line_and_field(tmp_path, turns, says):
    p = _write(tmp_path, SCRIPT, {"session_id": "s2", "turns": turns})
    with pytest.raises(UserError) as e:
        read_sessions(p)
    assert f"{p}:2" in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_not_json_and_duplicate_ids_name_their_line(tmp_path):
    with pytest.raises(UserError, match=r"s\.jsonl:2: not JSON"):
        read_sessions(_write(tmp_path, SCRIPT, "{oops"))
    with pytest.raises(UserError, match=r"s\.jsonl:2: session_id 's1' appears twice"):
        read_sessions(_write(tmp_path, SCRIPT, SCRIPT))


class _FakeServer:
    """Answers a model call as the simulator would (the tools named, in order), on a fake clock."""

    def __init__(self, fail_at: int = 0) -> None:
        self.now = 1000.0
        self.samples: list = []
        self.slept: list[float] = []
        self.fail_at = fail_at

    def send(self, sample):
        self.samples.append(sample)
        sent = self.now
        self.now += 0.05  # the call's own time
        choice = sample.tool_choice
        names = ([choice["function"]["name"]] if isinstance(choice, dict)
                 else [t["function"]["name"] for t in sample.tools] if choice == "required" else [])
        calls = [[f"id-{sample.turn}-{j}", n, '{"input": "x"}'] for j, n in enumerate(names)]
        return Answer(len(self.samples) != self.fail_at, None if calls else " the answer", calls, sent)

    def wait(self, s):
        self.slept.append(s)
        self.now += s


def _walk(server, may_send=lambda: True):
    [script] = [SessionScript.from_message({**SCRIPT, "line": 1})]
    return run_agentic(script, "s1@0.0", send=server.send, wait=server.wait, clock=lambda: server.now,
                       may_send=may_send, rng=random.Random(1))


def test_a_session_sends_the_whole_history_and_waits_each_tool_as_scripted():
    server = _FakeServer()
    out = _walk(server)
    assert out.completed and out.calls == 3 and out.cut is None
    assert server.slept == [0.25, 0.1, 0.2]
    first, second, third = server.samples
    assert [s.turn for s in server.samples] == [1, 2, 3] and third.last_turn and not second.last_turn
    assert {s.session_id for s in server.samples} == {"s1@0.0"}
    assert first.tool_choice == {"type": "function", "function": {"name": "search"}}
    assert second.tool_choice == "required" and [t["function"]["name"] for t in second.tools] == ["read", "test"]
    assert third.tool_choice is None and third.tools == []
    # the history grows by the answer (its tool calls, as streamed) and each tool's result
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[1]["tool_calls"][0]["id"] == "id-1-0" and second.messages[2]["tool_call_id"] == "id-1-0"
    assert [m["role"] for m in third.messages] == ["user", "assistant", "tool", "assistant", "tool", "tool"]
    assert [m.get("tool_call_id") for m in third.messages[4:]] == ["id-2-0", "id-2-1"]
    assert third.messages[5]["content"] == "ok"
    assert third.messages[:3] == second.messages  # a prefix: what a prefix cache can serve
    # the tool wait before a call, as measured on the clock; the session's start for its last call
    assert first.tool_wait_ms is None and second.tool_wait_ms == pytest.approx(250)
    assert third.tool_wait_ms == pytest.approx(300)
    assert third.session_start_unix == 1000.0 and second.session_start_unix == 1000.0


def test_a_failed_call_or_a_closed_window_cuts_the_session():
    server = _FakeServer(fail_at=2)
    out = _walk(server)
    assert (out.completed, out.calls, out.cut) == (False, 2, "failed")
    calls = iter([True, False])
    server = _FakeServer()
    out = _walk(server, may_send=lambda: next(calls))
    assert (out.completed, out.calls, out.cut) == (False, 1, "stopped") and server.slept == []


def _sim_job(body: dict, generated: int):
    dialect = OpenAIDialect(SimConfig())
    params = dialect.parse("chat", body)
    seq = SimpleNamespace(generated=generated, state="done", finish_reason="length", max_tokens=params.max_tokens)
    return dialect, SimpleNamespace(id="chatcmpl-abc", params=params, seq=seq, created=0, reasoning=0)


def test_the_simulator_streams_the_named_tool_calls_and_the_client_parses_them_back():
    tools = [{"type": "function", "function": {"name": n}} for n in ("read", "test")]
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
            "stream": True, "tools": tools, "tool_choice": "required"}
    dialect, job = _sim_job(body, 6)
    parser = get_dialect("openai-chat").parser(True)
    parser.keep_text()
    for first in range(1, 7):  # one token a chunk
        event = dialect.token_event(job, first, first, False, first == 6)
        assert parser.event(event[len(b"data: "):].strip()) == 1  # OUTPUT: not visible content
    assert parser.finish_reason == "tool_calls"
    assert [c[1] for c in parser.calls] == ["read", "test"]
    assert all(c[0] for c in parser.calls) and parser.calls[0][0] != parser.calls[1][0]
    args = [orjson.loads(c[2]) for c in parser.calls]  # each call's arguments are JSON
    assert [len(a["input"].split()) for a in args] == [3, 3]  # 6 output tokens split evenly


def test_the_simulator_counts_a_tool_call_in_the_next_prompt_and_refuses_an_unknown_tool():
    msgs = [{"role": "user", "content": "hi"}]
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"input": "a long query"}'}}]}
    dialect = OpenAIDialect(SimConfig())
    short = dialect.parse("chat", {"model": "sim-model", "messages": msgs + [{"role": "assistant", "content": None}]})
    long = dialect.parse("chat", {"model": "sim-model", "messages": msgs + [call]})
    assert long.prompt_tokens > short.prompt_tokens
    tools = [{"type": "function", "function": {"name": "search"}}]
    with pytest.raises(BadRequest, match="tool_choice"):
        dialect.parse("chat", {"model": "sim-model", "messages": msgs, "tools": tools,
                               "tool_choice": {"type": "function", "function": {"name": "other"}}})


def test_the_client_sends_the_tools_and_the_choice():
    from capacity_plugins.corpus.agentic import model_call

    [s] = [SessionScript.from_message({**SCRIPT, "line": 1})]
    sample = model_call(s, "s1@0.0", s.turns[1], 1, [{"role": "user", "content": "q"}], last=False,
                        tool_wait_ms=None, start_unix=None)
    call = get_dialect("openai-chat").build(sample, RequestParams(model="m"))
    body = orjson.loads(call.body)
    assert body["tools"][0]["function"]["name"] == "search" and body["max_tokens"] == 6
    assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}}


def test_the_shipped_scenario_and_script_read():
    from capacity_plugins.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios/agentic_sessions.yaml")
    scripts = sc.load.agentic_sessions(sc)
    assert scripts and all(SessionScript.from_message(m).model_calls == 3 for m in scripts)
    sc.load.check_inputs(sc)


def test_aiperf_multi_turn_trace_imports_as_scripts_that_read_back(tmp_path):
    from capacity_plugins.corpus.agentic import sessions_from_aiperf, write_sessions

    trace = tmp_path / "aiperf.jsonl"
    trace.write_text("\n".join(json.dumps(x) for x in [
        {"session_id": "a", "input_length": 500, "output_length": 40},
        {"session_id": "b", "text_input": "x" * 40, "output_length": 8},
        {"session_id": "a", "input_length": 120, "output_length": 30, "delay": 1500},
        {"session_id": "a", "input_length": 60, "output_length": 90, "delay": 250},
    ]) + "\n")
    scripts = sessions_from_aiperf(trace)
    out = tmp_path / "s.jsonl"
    write_sessions(scripts, out)
    a, b = read_sessions(out)
    assert (a.session_id, a.model_calls, b.model_calls) == ("a", 3, 1)
    assert [t.latency for t in a.turns if t.role == "tool"] == [1.5, 0.25]
    assert [t.tokens for t in a.turns if t.role == "tool"] == [120, 60]
    assert [t.output_tokens for t in a.turns if t.role == "assistant"] == [40, 30, 90]
    assert b.turns[0].tokens == 10
    trace.write_text(json.dumps({"session_id": "a", "input_length": 5, "output_length": 4, "delay": -1}) + "\n")
    with pytest.raises(UserError, match=r"aiperf\.jsonl:1: delay"):
        sessions_from_aiperf(trace)


def test_records_of_completed_sessions_become_scripts_of_the_same_shape():
    from capacity_plugins.corpus.agentic import sessions_from_records

    def rec(sid, turn, prompt, out, wait=None, session=None, ok=True):
        return {"session_id": sid, "turn": turn, "prompt_tokens": prompt, "output_tokens": out, "ok": ok,
                "tool_wait_ms": wait, "session_ms": session}

    records = [rec("s@0.0", 1, 130, 6), rec("s@0.0", 2, 345, 8, wait=301.0), rec("s@0.0", 3, 520, 10, 202.0, 900.0),
               rec("cut@0.1", 1, 130, 6), rec("cut@0.1", 2, 345, 8, wait=300.0)]  # never finished: left out
    [script] = sessions_from_records(records)
    s = SessionScript.from_message({**script, "line": 1})
    assert s.session_id == "s@0.0" and s.model_calls == 3
    assert [t.tokens for t in s.turns if t.role != "assistant"] == [130, 345 - 136, 520 - 353]
    assert [t.latency for t in s.turns if t.role == "tool"] == [0.301, 0.202]


def test_each_process_deals_whole_sessions_of_its_own_share_and_a_worker_gets_them_in_setup():
    from capacity_plugins.contracts.options import LLMOptions
    from capacity_plugins.rehearsal.source import AgenticDeck
    from capacity_plugins.swarm.messages import Setup

    scripts = [{**SCRIPT, "session_id": f"s{i}", "line": i + 1} for i in range(5)]
    setup = Setup.from_data(Setup(options=LLMOptions(), sha256="x", shard_count=2, sessions=scripts).to_data())
    assert setup.sessions == scripts
    dealt = {}
    for k in (0, 1):
        deck = AgenticDeck(setup.sessions, SimpleNamespace(worker_index=k, worker_count=2))
        dealt[k] = [deck.next() for _ in range(4)]
    # process 0 walks scripts 0, 2, 4; process 1 scripts 1, 3: a session is one user's, on one process
    assert [s.session_id for s, _, _ in dealt[0]] == ["s0", "s2", "s4", "s0"]
    assert [s.session_id for s, _, _ in dealt[1]] == ["s1", "s3", "s1", "s3"]
    runs = [r for k in dealt for _, r, _ in dealt[k]]
    assert len(set(runs)) == len(runs) and runs[0] == "s0@0.0" and runs[4] == "s1@1.0"


def test_capacity_trace_from_aiperf_writes_scripts_or_one_line(tmp_path, capsys):
    from capacity_plugins.corpus.trace_cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"session_id": "a", "input_length": 5, "output_length": 4}) + "\n")
    assert main(["from-aiperf", str(trace)]) == 0
    assert "1 sessions" in capsys.readouterr().out
    assert read_sessions(tmp_path / "t.sessions.jsonl")[0].model_calls == 1
    trace.write_text(json.dumps({"session_id": "a", "output_length": 4}) + "\n")
    with pytest.raises(UserError, match=r"t\.jsonl:1: input_length"):
        main(["from-aiperf", str(trace)])


def _closed_loop(rng: np.random.Generator, users: int, mean_s: float, cv: float, begin_s: float,
                 window_s: float) -> list[float]:
    """The completion times of the sessions that end in [begin, begin + window) when `users` each
    walk log-normal sessions (mean `mean_s`, coefficient of variation `cv`) one after another."""
    sigma = math.sqrt(math.log(1 + cv * cv))
    mu = math.log(mean_s) - sigma * sigma / 2
    done = []
    for _ in range(users):
        t = rng.uniform(0, mean_s)  # users start apart, as a ramp leaves them
        while t < begin_s + window_s:
            d = float(rng.lognormal(mu, sigma))
            if begin_s <= t + d < begin_s + window_s:
                done.append(d)
            t += d
    return done


@pytest.mark.parametrize(("users", "window_s"), [(3, 8.0), (8, 20.0)])
def test_the_sessions_per_minute_interval_covers_the_closed_loops_true_rate(users, window_s):
    """Coverage by simulation against the known truth users / mean session time (Little's law):
    a few dozen sessions a step, as agentic steps complete, log-normal times of CV 0.5."""
    rng = np.random.default_rng(29)
    mean_s, truth, runs, covered, methods = 1.5, users / 1.5, 1000, 0, set()
    for _ in range(runs):
        done = _closed_loop(rng, users, mean_s, 0.5, 10.0, window_s)
        point, lo, hi, method = sessions_rate(users, done, window_s, 0.95)
        methods.add(method)
        covered += lo <= truth <= hi
    assert methods == {"littles_law"}
    assert 0.92 <= covered / runs <= 0.985, covered / runs


def test_too_few_sessions_are_counted_with_the_counts_interval():
    point, lo, hi, method = sessions_rate(4, [1.0, 1.2, 0.9], 10.0, 0.95)
    assert method == "counting" and point == pytest.approx(0.3) and 0 < lo < point < hi
    assert sessions_rate(4, [], None, 0.95) is None


def test_a_dialect_that_cannot_carry_tool_calls_is_one_line_naming_the_field(tmp_path):
    from helpers.processes import capacity

    doc = (ROOT / "scenarios/agentic_sessions.yaml").read_text().replace("openai-chat", "ollama")
    assert "ollama" in doc
    (tmp_path / "s.yaml").write_text(doc)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces/agentic_sessions.jsonl").write_text((ROOT / "scenarios/traces/agentic_sessions.jsonl").read_text())
    r = capacity("run", str(tmp_path / "s.yaml"), timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "s.yaml" in line and "kind agentic sends tool calls" in line and "target.dialect to openai-chat" in line
