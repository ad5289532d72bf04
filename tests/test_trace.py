"""Trace replay without Locust: reading a trace (one-line errors), cutting it into windows,
synthesising prompts with the trace's prefix sharing, and the shipped example trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import ROOT

from capacity_plugins.corpus.trace import (
    DEFAULT_BLOCK_TOKENS,
    read_trace,
    synth_prompt,
    trace_sample,
    trace_windows,
)
from capacity_plugins.errors import UserError
from capacity_plugins.rehearsal.arrivals import ArrivalPlan, shard
from capacity_plugins.scenario import TraceLoad, parse_scenario
from capacity_plugins.simulator.tokens import block_hashes, count_tokens, prompt_units


def _write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_reads_mooncake_lines_sorted_by_timestamp(tmp_path):
    p = _write(tmp_path, [
        {"timestamp": 2000, "input_length": 10, "output_length": 5},
        {"timestamp": 0, "input_length": 1024, "output_length": 7, "hash_ids": [1, 2], "class": "rag", "session_id": 9},
        "",
        {"timestamp": 500, "prompt": "hello there", "output_length": 3},
    ])
    rows = read_trace(p)
    assert [r.timestamp_ms for r in rows] == [0, 500, 2000]
    assert rows[0].hash_ids == (1, 2) and rows[0].cls == "rag" and rows[0].session_id == "9"
    assert rows[1].prompt == "hello there" and rows[1].input_length == 3  # estimated from the text
    assert rows[2].line == 1


@pytest.mark.parametrize(("line", "field"), [
    ('{"input_length": 10, "output_length": 5}', "timestamp: missing"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 5}', "timestamp: must be"),
    ('{"timestamp": 1, "output_length": 5}', "input_length: missing"),
    ('{"timestamp": 1, "input_length": 2.5, "output_length": 5}', "input_length: must be"),
    ('{"timestamp": 1, "input_length": 10}', "output_length: missing"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [1, "x"]}', "hash_ids: must be"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 5, "prompt": ""}', "prompt: must be"),
    ("not json", "line: not JSON"),
    ("[1, 2]", "line: must be a JSON object"),
])
def test_a_bad_line_is_one_error_naming_file_line_and_field(tmp_path, line, field):
    p = _write(tmp_path, [{"timestamp": 0, "input_length": 1, "output_length": 1}, line])
    with pytest.raises(UserError) as e:
        read_trace(p)
    assert str(e.value).startswith(f"{p}:2: {field}")
    assert "\n" not in str(e.value)


def test_missing_and_empty_traces(tmp_path):
    with pytest.raises(UserError, match="trace file not found"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="no requests"):
        read_trace(_write(tmp_path, [""]))


def _uniform(n: int, gap_ms: int) -> list[dict]:
    return [{"timestamp": i * gap_ms, "input_length": 8, "output_length": 4} for i in range(n)]


def test_windows_cover_the_span_exactly_and_speedup_compresses_wall_time(tmp_path):
    rows = read_trace(_write(tmp_path, _uniform(100, 100)))  # 10 s at 10 requests/s
    ws = trace_windows(rows, speedup=2.0, window_s=3.0)
    assert [w.trace_start_s for w in ws] == [0.0, 3.0, 6.0, 9.0]
    assert sum(len(w.offsets) for w in ws) == 100
    assert ws[0].wall_s == 1.5 and ws[0].offered_rps == pytest.approx(20.0)
    # wall offsets are trace offsets / speedup from each window's start
    assert ws[1].offsets[:2] == pytest.approx((0.0, 0.05))
    assert all(0 <= o < w.wall_s for w in ws for o in w.offsets)
    assert [r[0] for w in ws for r in w.requests] == list(range(100))  # each request once, in order


def test_start_duration_window_and_loop(tmp_path):
    rows = read_trace(_write(tmp_path, _uniform(10, 1000)))  # 10 s long (9 s span + one gap)
    ws = trace_windows(rows, start_s=4.0, duration_s=3.0, window_s=10.0)
    assert [r[0] for r in ws[0].requests] == [4, 5, 6]
    looped = trace_windows(rows, duration_s=25.0, loop=True, window_s=5.0)
    ids = [r[0] for w in looped for r in w.requests]
    assert ids == list(range(10)) * 2 + list(range(5))
    with pytest.raises(UserError, match="needs a duration"):
        trace_windows(rows, loop=True)
    with pytest.raises(UserError, match="past the trace's end"):
        trace_windows(rows, start_s=50.0)


def test_same_hash_ids_same_prefix_text_and_exact_lengths():
    a = synth_prompt(1200, [7, 8, 9], row=1)
    b = synth_prompt(1200, [7, 8, 10], row=2)
    c = synth_prompt(300, [7], row=3)
    assert count_tokens(a) == 1200 and count_tokens(c) == 300
    block = DEFAULT_BLOCK_TOKENS * 4
    assert a[: 2 * block] == b[: 2 * block] and a[2 * block:] != b[2 * block:]
    assert a.startswith(c)  # a shorter request with the same first id shares that prefix
    # the simulator's prefix cache (16-token blocks) sees exactly the shared blocks
    ha, hb = block_hashes(prompt_units(a), 16), block_hashes(prompt_units(b), 16)
    shared = sum(1 for x, y in zip(ha, hb, strict=False) if x == y)
    assert shared == 2 * DEFAULT_BLOCK_TOKENS // 16
    # no hash_ids: text of its own, filled to the length
    assert count_tokens(synth_prompt(50, [], row=4)) == 50 and synth_prompt(50, [], row=4) != synth_prompt(50, [], row=5)


def test_a_sample_asks_for_the_recorded_output_length_and_keeps_a_given_prompt():
    s = trace_sample((3, 100, 42, [1], None))
    assert s.max_tokens == 42 and s.id == "trace-3" and count_tokens(s.prompt or "") == 100
    assert trace_sample([4, 2, 5, [], "hi there", "rag"]).prompt == "hi there"  # msgpack gives lists
    assert trace_sample([4, 2, 5, [], None, "rag"]).workload_class == "rag"  # the record's `class`


def test_arrival_plan_carries_the_window_and_shards_partition_it(tmp_path):
    rows = read_trace(_write(tmp_path, _uniform(37, 130)))
    w = trace_windows(rows, window_s=100.0)[0]
    plan = ArrivalPlan(arrival="constant", rate=w.offered_rps, duration_s=w.wall_s, offsets=w.offsets,
                       requests=w.requests)
    offs = plan.schedule(0)
    assert np.array_equal(offs, np.asarray(w.offsets))
    parts = [(shard(offs, k, 3), list(plan.requests or [])[k::3]) for k in range(3)]
    merged = sorted((float(o), r[0]) for o_s, rs in parts for o, r in zip(o_s, rs, strict=True))
    assert merged == sorted((o, r[0]) for o, r in zip(w.offsets, w.requests, strict=True))


def test_scenario_trace_kind(tmp_path):
    _write(tmp_path, _uniform(5, 100), "tr.jsonl")
    src = tmp_path / "s.yaml"
    s = parse_scenario({"target": {"url": "http://x"}, "load": {"kind": "trace", "path": "tr.jsonl", "speedup": 3}},
                       where="s.yaml", source=src)
    assert isinstance(s.load, TraceLoad) and s.open_loop and s.trace_path() == tmp_path / "tr.jsonl"
    with pytest.raises(UserError, match="load.path: trace file not found"):
        parse_scenario({"target": {"url": "http://x"}, "load": {"kind": "trace", "path": "no.jsonl"}},
                       where="s.yaml", source=src)
    with pytest.raises(UserError, match="needs duration_s"):
        parse_scenario({"target": {"url": "http://x"}, "load": {"kind": "trace", "path": "tr.jsonl", "loop": True}},
                       where="s.yaml", source=src)


def test_the_shipped_example_trace_is_what_its_script_writes_and_has_a_burst():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_example_trace", ROOT / "scripts/make_example_trace.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shipped = [json.loads(line) for line in (ROOT / "scenarios/traces/burst.jsonl").read_text().splitlines()]
    assert shipped == mod.build()
    conv = [json.loads(line) for line in (ROOT / "scenarios/traces/sessions.jsonl").read_text().splitlines()]
    assert conv == mod.build_sessions()
    rows = read_trace(ROOT / "scenarios/traces/burst.jsonl")
    rates = [w.offered_rps for w in trace_windows(rows, window_s=30.0)]
    assert rates[2] > 3 * max(rates[0], rates[1], rates[3])  # the burst is 60–90 s
    assert sum(1 for r in rows if r.hash_ids[:1] == (0,)) > 50  # shared prefixes


def test_session_turns_and_the_session_shard_keep_a_conversation_on_one_process(tmp_path):
    from capacity_plugins.corpus.trace import session_shard, session_turns

    lines = [{"timestamp": i * 100, "input_length": 5, "output_length": 2, "session_id": f"s{i % 3}"} for i in range(9)]
    lines += [{"timestamp": 950, "input_length": 5, "output_length": 2}]  # no session: round-robin
    rows = read_trace(_write(tmp_path, lines))
    assert session_turns(rows) == [1, 1, 1, 2, 2, 2, 3, 3, 3, None]
    reqs = trace_windows(rows, window_s=100.0)[0].requests
    assert [r[6:] for r in reqs[:4]] == [("s0", 1), ("s1", 1), ("s2", 1), ("s0", 2)]
    parts = [session_shard(reqs, k, 2) for k in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(len(reqs)))  # every arrival exactly once
    for part in parts:
        sids = {reqs[i][6] for i in part if reqs[i][6] is not None}
        assert all(reqs[i][6] not in sids for other in parts if other is not part for i in other)


def test_a_session_turn_sends_the_history_then_its_own_message():
    s = trace_sample((5, 10, 7, [], None, "chat", "s1", 2),
                     history=[{"role": "user", "content": "first"}, {"role": "assistant", "content": "answer"}])
    assert s.messages is not None and [m["role"] for m in s.messages] == ["user", "assistant", "user"]
    assert count_tokens(s.messages[-1]["content"]) == 10
    assert (s.session_id, s.turn, s.max_tokens) == ("s1", 2, 7)


def test_session_store_orders_turns_and_keeps_answers():
    import gevent

    from capacity_plugins.client.sessions import SessionStore

    store = SessionStore()
    order: list[str] = []

    def turn(name: str, hold: float) -> None:
        history = store.begin("s", timeout_s=5)
        order.append(f"{name} sees {len(history)}")
        gevent.sleep(hold)
        store.end("s", f"q-{name}", f"a-{name}")

    a = gevent.spawn(turn, "t1", 0.05)
    gevent.sleep(0)  # t1 is in flight
    b = gevent.spawn(turn, "t2", 0.0)  # arrives early: waits for t1's answer
    gevent.joinall([a, b], timeout=5)
    assert order == ["t1 sees 0", "t2 sees 2"]
    assert store.begin("s", timeout_s=1)[-1] == {"role": "assistant", "content": "a-t2"}


def test_a_session_turn_against_a_server_without_usage_keeps_the_answer(start_simulator, tmp_path):
    from helpers.users import local_user

    sim = start_simulator(no_usage=True)  # no server count: the answer's text is still kept
    u = local_user(sim.url, tmp_path, model="sim-model", max_tokens=16, timeout_s=10.0, retries=0, headers=[],
                   api_key_env="", insecure=False, sampling="shuffle", seed=0)
    first = (0, 40, 5, [1], None, "chat", "s1", 1)
    second = (1, 10, 5, [], None, "chat", "s1", 2)
    u.user._session_turn(first, None)
    u.user._session_turn(second, None)
    u.records.close()
    recs = [json.loads(x) for x in (u.results_dir / "requests.jsonl").read_text().splitlines()]
    assert [(r["ok"], r["session_id"], r["turn"]) for r in recs] == [(True, "s1", 1), (True, "s1", 2)]
    history = u.source.sessions.begin("s1", timeout_s=1)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1]["content"].strip()  # the server's answer, sent back with turn 2
    assert recs[1]["prompt_tokens"] is None or recs[1]["prompt_tokens"] > recs[0]["prompt_tokens"]
