"""Agentic sessions end to end: `capacity run` with `load.kind: agentic` against the simulator, whose
answers are known from the script — across two worker processes, each session's model calls in
order on one generator, the tool
calls the script names streamed back, the tools' latencies waited as scripted between a call's
last byte and the next call's send, the completion time the records add up to, the growing
history served from the simulator's prefix cache, and the summary's sessions per minute, whose
interval holds the closed form of the simulator's configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.processes import capacity
from helpers.results import read_records, results_dir
from helpers.scenarios import write_scenario

from capacity_plugins.simulator.truth import read_truth

# One session script: a call asking for one tool, 0.3 s of tool, a call asking for two tools,
# 0.1 s + 0.1 s of tools, the final answer.
WAITS_S = {2: 0.3, 3: 0.2}
SCRIPT = {"session_id": "agent", "turns": [
    {"role": "user", "tokens": 120},
    {"role": "assistant", "output_tokens": 6, "tool_calls": [{"name": "search"}]},
    {"role": "tool", "latency_s": 0.3, "result_tokens": 200},
    {"role": "assistant", "output_tokens": 8, "tool_calls": [{"name": "read"}, {"name": "test"}]},
    {"role": "tool", "latency_s": 0.1, "result_tokens": 100},
    {"role": "tool", "latency_s": {"dist": "uniform", "low": 0.1, "high": 0.1}, "result_tokens": 60},
    {"role": "assistant", "output_tokens": 10}]}
# A wait is a gevent sleep: it overshoots by the loop's wake-up lag, never undershoots.
LATE_MS = 40
# concurrent sessions, two on each of the two worker processes: fewer than the simulator's slots
USERS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory, request):
    from capacity_plugins.simulator.config import SimConfig
    from capacity_plugins.simulator.launch import SimulatorProcess

    tmp = tmp_path_factory.mktemp("agentic")
    (tmp / "sessions.jsonl").write_text(json.dumps(SCRIPT) + "\n")
    truth = tmp / "truth.jsonl"
    sim = SimulatorProcess(SimConfig(prefix_cache=True), truth_log=truth)
    request.addfinalizer(sim.stop)
    scenario = write_scenario(
        tmp, "agentic", target={"url": sim.url, "dialect": "openai-chat", "model": "sim-model"},
        request={"ignore_eos": True, "timeout_s": 10},
        load={"kind": "agentic", "path": str(tmp / "sessions.jsonl"), "levels": [USERS], "step_s": 6,
              "warmup_s": 1, "session_p95_s": 30},
        slo={"ttft_p95_ms": 2000})
    r = capacity("run", str(scenario), "--processes", "2", timeout=90)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    return folder, read_records(folder), truth


def _sessions(records):
    by: dict[str, list[dict]] = {}
    for x in records:
        by.setdefault(x["session_id"], []).append(x)
    return {k: sorted(v, key=lambda x: x["turn"]) for k, v in by.items()}


@pytest.mark.slow
@pytest.mark.measured
def test_each_session_runs_its_script_on_one_generator_with_the_scripted_tool_waits(run):
    _, records, _ = run
    done = {k: v for k, v in _sessions(records).items() if v[-1]["session_ms"] is not None}
    assert len(done) >= 6, f"only {len(done)} sessions completed"
    assert len({turns[0]["worker"] for turns in done.values()}) == 2  # both processes walked sessions
    for turns in done.values():
        assert [x["turn"] for x in turns] == [1, 2, 3] and all(x["ok"] for x in turns)
        assert len({x["worker"] for x in turns}) == 1
        assert [x["finish_reason"] for x in turns] == ["tool_calls", "tool_calls", "length"]
        assert [x["output_tokens"] for x in turns] == [6, 8, 10]
        prompts = [x["prompt_tokens"] for x in turns]
        assert prompts == sorted(prompts)  # the history grows
        assert turns[0]["tool_wait_ms"] is None
        for prev, nxt in zip(turns, turns[1:], strict=False):
            want = WAITS_S[nxt["turn"]] * 1000
            assert want <= nxt["tool_wait_ms"] <= want + LATE_MS
            gap = (nxt["sent_unix"] - prev["sent_unix"]) * 1000 - prev["e2e_ms"]
            assert want - 1 <= gap <= want + LATE_MS  # the records say it too, on their own clock
        last = turns[-1]
        total = (last["sent_unix"] - turns[0]["sent_unix"]) * 1000 + last["e2e_ms"]
        assert last["session_ms"] == pytest.approx(total, abs=1)
        assert all(x["session_ms"] is None for x in turns[:-1])


@pytest.mark.slow
@pytest.mark.measured
def test_the_prefix_cache_serves_the_history_a_session_grows(run):
    from capacity_plugins.simulator.config import SimConfig

    _, records, truth = run
    block = SimConfig().block_size
    rows = {r["id"]: r for r in read_truth(truth)}
    checked = 0
    for turns in _sessions(records).values():
        for prev, nxt in zip(turns, turns[1:], strict=False):
            if not (prev["ok"] and nxt["ok"]) or nxt["response_id"] not in rows:
                continue
            # a call re-sends the previous call's whole prompt first: all its full blocks are cached
            assert rows[nxt["response_id"]]["cached_tokens"] >= prev["prompt_tokens"] // block * block
            checked += 1
    assert checked >= 10


@pytest.mark.slow
@pytest.mark.measured
def test_the_summary_states_sessions_per_minute_and_the_session_percentiles(run):
    folder, records, _ = run
    summary = json.loads((Path(folder) / "summary.json").read_text())
    agentic = summary["agentic"]
    [step] = agentic["steps"]
    measured_done = [x for x in records if x["session_ms"] is not None and x["step"] == 0 and not x["warmup"]]
    assert step["sessions_completed"] == len(measured_done) > 0
    # Little's law: the concurrent sessions over the mean time of the sessions completed
    mean_s = sum(x["session_ms"] for x in measured_done) / len(measured_done) / 1000
    assert step["sessions_per_min_method"] == "littles_law"
    assert step["sessions_per_min"] == pytest.approx(USERS * 60 / mean_s)
    lo, hi = step["sessions_per_min_ci"]
    assert lo < step["sessions_per_min"] < hi
    assert step["calls_per_session"] == 3
    assert step["session_p95_s"] >= sum(WAITS_S.values())
    assert step["session_slo_pass"] is True
    assert "concurrent agentic sessions" in agentic["line"] and agentic["per_node_sessions"] is not None
    # the plain answer says it in sessions too, after the requests/s
    assert f"That is at least {USERS} concurrent agentic sessions (" in summary["answer"]
    assert "Agentic sessions" in (Path(folder) / "summary.md").read_text()


@pytest.mark.slow
@pytest.mark.measured
def test_session_time_and_sessions_per_minute_match_the_simulators_closed_form(run):
    from capacity_plugins.simulator.config import SimConfig

    folder, records, _ = run
    cfg = SimConfig()
    outs, users = [6, 8, 10], USERS  # fewer sessions than slots: no queue, a batch of 1 to 4 decoding
    # each output token is one decode step of base + per_seq × batch; prefill at most the whole
    # prompt (the cache only shortens it); the client's own share: a few ms per call and per wake-up
    prompts = sorted({x["prompt_tokens"] for x in records if x["ok"]})
    low_ms = sum(WAITS_S.values()) * 1000 + sum(outs) * (cfg.decode_base_ms + cfg.decode_per_seq_ms)
    high_ms = (sum(WAITS_S.values()) * 1000 + (sum(outs) + len(outs)) * (cfg.decode_base_ms + cfg.decode_per_seq_ms * users)
               + 3 * max(prompts) / cfg.prefill_tokens_per_s * 1000 + 3 * LATE_MS + 3 * 20)
    done = [x["session_ms"] for x in records if x["session_ms"] is not None]
    mean_ms = sum(done) / len(done)
    assert low_ms <= mean_ms <= high_ms, (low_ms, mean_ms, high_ms)
    # sessions per minute: the closed form's range (users over the session time's bounds) meets
    # the measured interval
    agentic = json.loads((Path(folder) / "summary.json").read_text())["agentic"]
    [step] = agentic["steps"]
    lo, hi = step["sessions_per_min_ci"]
    assert lo <= users * 60_000 / low_ms and users * 60_000 / high_ms <= hi, (lo, hi, low_ms, high_ms)
    # and one node's capacity in sessions says it, with its interval (no level failed: a lower bound)
    assert agentic["per_node_sessions"] == users and agentic["limited_by"] == "never_failed"
    assert agentic["per_node_sessions_per_min_ci"] == [lo, hi]


@pytest.mark.slow
@pytest.mark.measured
def test_trace_from_records_captures_the_sessions_as_replayable_scripts(run, tmp_path):
    from capacity_plugins.corpus.agentic import read_sessions
    from capacity_plugins.corpus.trace_cli import records_sessions

    folder, records, _ = run
    found = records_sessions(folder, tmp_path / "sessions.jsonl")
    assert found is not None
    scripts = read_sessions(found[0])
    done = {x["session_id"] for x in records if x["session_ms"] is not None}
    assert {s.session_id for s in scripts} == done
    for s in scripts:
        assert s.model_calls == 3
        assert [t.output_tokens for t in s.turns if t.role == "assistant"] == [6, 8, 10]
        waits = [t.latency for t in s.turns if t.role == "tool"]
        assert 0.3 <= waits[0] <= 0.3 + LATE_MS / 1000 and 0.2 <= waits[1] <= 0.2 + LATE_MS / 1000
