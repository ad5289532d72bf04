"""Trace replay end to end: the shipped scenario (scenarios/trace_replay.yaml, its example trace)
against the embedded simulator — at 1× the SLO holds, at 3× it breaks in the burst window, and
across --processes 2 the workers' arrivals are the trace's schedule exactly. Each run replays a
short span of the trace (tens of seconds); a bad trace is exit 2 before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.processes import capacity, env_with
from helpers.results import read_records, read_steps, results_dir

from capacity_plugins.corpus.trace import read_trace, trace_windows

SCENARIO = str(ROOT / "scenarios/trace_replay.yaml")
TRACE = ROOT / "scenarios/traces/burst.jsonl"
TEST_SLO = ("--ttft-p95-ms", "2500", "--tpot-p95-ms", "250")


def _replay(tmp_path: Path, *args: str, speedup: float, start_s: float, duration_s: float, window_s: float,
            analyze: bool = True) -> tuple[Path, dict]:
    env = env_with(TRACE_SPEEDUP=str(speedup), TRACE_START_S=str(start_s), TRACE_DURATION_S=str(duration_s),
                   TRACE_WINDOW_S=str(window_s))
    r = capacity("run", SCENARIO, "--output", str(tmp_path / "results"), *args, "--no-analyze", timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    if not analyze:
        return folder, {}
    # Judged against a wider SLO than the scenario's 1 s: the 3× burst's queue takes TTFT to several
    # seconds, while 1× stays well under a second — 2.5 s tells the two apart even on a shared, busy
    # test machine (where the simulator and Locust compete for two cores). Exit 1 = the capacity
    # decision could not be completed (a busy machine can flag a window client_limited): the
    # windows' SLO judgements, which these tests check, are written all the same.
    a = capacity("analyze", str(folder), "--quiet", *TEST_SLO, timeout=120)
    assert a.returncode in (0, 1), a.stderr
    return folder, json.loads((folder / "summary.json").read_text())


def _trustworthy(windows: list[dict]) -> list[dict]:
    """The windows whose latencies mean something: a window flagged client_limited had a generator
    that could not keep time (on a shared test machine, starved of CPU), and the product itself
    says its numbers decide nothing. None left: the machine is too busy to judge latency at all."""
    ok = [w for w in windows if w["valid"]]
    if not ok:
        pytest.skip("every window was flagged client_limited: this machine is too busy to judge latency ("
                    + "; ".join(w["invalid_reasons"][0] for w in windows if w["invalid_reasons"]) + ")")
    return ok


@pytest.mark.measured
@pytest.mark.slow
def test_at_1x_the_slo_holds_in_every_window(tmp_path):
    folder, s = _replay(tmp_path, speedup=1, start_s=50, duration_s=40, window_s=20)
    # every request asked for its recorded output length and carries its class
    by_row = {f"trace-{i}": r for i, r in enumerate(read_trace(TRACE))}
    recs = [r for r in read_records(folder) if r["ok"]]
    assert recs and all(r["max_tokens"] == by_row[r["prompt_id"]].output_length for r in recs)
    assert all(r["output_tokens"] == r["max_tokens"] for r in recs)  # ignore_eos
    assert all(r["workload"] == by_row[r["prompt_id"]].cls for r in recs)  # the trace line's class, per request
    trace = s["trace"]
    assert [w["trace_start_s"] for w in trace["windows"]] == [50, 70]
    judged = _trustworthy(trace["windows"])
    assert all(w["slo_pass"] for w in judged)
    if len(judged) == len(trace["windows"]):
        assert trace["first_broken_window"] is None
        assert "the SLO held in every window" in s["verdict"]["reasons"][0]


@pytest.mark.measured
@pytest.mark.slow
def test_at_3x_the_slo_breaks_in_the_burst_window(tmp_path):
    folder, s = _replay(tmp_path, speedup=3, start_s=30, duration_s=90, window_s=30)
    trace = s["trace"]
    before, burst, _after = trace["windows"]
    assert burst["offered_rps"] > 3 * before["offered_rps"]
    assert burst["slo_pass"] is False  # past the simulator's capacity: the queue breaks it, flagged or not
    if before["valid"]:  # not flagged client_limited (see _trustworthy)
        assert before["slo_pass"] is True
        assert trace["first_broken_window"] == 1
        assert s["verdict"]["reasons"][0].startswith("trace replay at 3×: the SLO first broke in window 2 of 3 "
                                                     "(trace 60–90 s")
    assert "| 2 | 60–90 |" in (folder / "summary.md").read_text()  # the report's trace table


@pytest.mark.slow
def test_processes_2_split_the_trace_schedule_exactly(tmp_path):
    # 56–76 s: the burst, with no arrival in the last 0.15 s of a window (one due at the very end
    # may be taken by a user only after the window closed, and is then not sent).
    folder, _ = _replay(tmp_path, "--processes", "2", speedup=1, start_s=56, duration_s=20, window_s=10, analyze=False)
    steps = read_steps(folder)
    windows = trace_windows(read_trace(TRACE), start_s=56, duration_s=20, window_s=10)
    recs = [r for r in read_records(folder) if r["attempt"] == 1]
    assert {r["worker"] for r in recs} == {0, 1}  # both workers sent
    for st, w in zip(steps, windows, strict=True):
        mine = [r for r in recs if r["step"] == st["index"]]
        got = sorted((round(r["scheduled_unix"] - st["start_unix"], 3), r["prompt_id"]) for r in mine)
        want = sorted((round(o, 3), f"trace-{req[0]}") for o, req in zip(w.offsets, w.requests, strict=True))
        assert got == want  # nothing lost, nothing sent twice, each at its own time with its own request
        shares = [sum(1 for r in mine if r["worker"] == k) for k in (0, 1)]
        assert abs(shares[0] - shares[1]) <= 1  # arrivals k, k+2, …: an exact split


def test_a_bad_trace_line_is_exit_2_naming_file_line_and_field(tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 4}\n'
                     '{"timestamp": 5, "input_length": 10, "output_length": "many"}\n')
    sc = tmp_path / "s.yaml"
    sc.write_text(f"target: {{url: embedded}}\nload: {{kind: trace, path: {trace}}}\noutput: {tmp_path}/results\n")
    r = capacity("run", str(sc), timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"{trace}:2: output_length: must be a whole number ≥ 1, got 'many'"), r.stderr


# alone: it asserts the run decides, so its two generators must not be client limited (on a loaded
# 2-core host beside the parallel phase they were, and the run rightly refused); beside a measured
# sweep, its two generators took the other sweep's CPU (a capacity search failed at 2 users)
@pytest.mark.alone
@pytest.mark.slow
def test_multi_turn_sessions_grow_prompts_and_hit_the_prefix_cache_across_processes(tmp_path):
    # scenarios/sessions_replay.yaml: 16 conversations × 4 turns, simulator prefix cache on
    r = capacity("run", str(ROOT / "scenarios/sessions_replay.yaml"), "--output", str(tmp_path / "results"),
                 "--processes", "2", timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    recs = [x for x in read_records(folder) if x["ok"]]
    by_session: dict[str, list[dict]] = {}
    for x in recs:
        by_session.setdefault(x["session_id"], []).append(x)
    assert len(by_session) == 16
    for turns in by_session.values():
        turns.sort(key=lambda x: x["turn"])
        assert [x["turn"] for x in turns] == [1, 2, 3, 4]
        assert len({x["worker"] for x in turns}) == 1  # a conversation stays in one process
        prompts = [x["prompt_tokens"] for x in turns]
        assert prompts == sorted(prompts) and prompts[-1] > prompts[0]  # the history grows
        for prev, nxt in zip(turns, turns[1:], strict=False):  # a turn starts after the previous answer
            assert nxt["sent_unix"] >= prev["sent_unix"] + prev["e2e_ms"] / 1000.0 - 1e-3
    assert {x["worker"] for x in recs} == {0, 1}
    trace = json.loads((folder / "summary.json").read_text())["trace"]
    turns = trace["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    _trustworthy(trace["windows"])  # a generator starved of CPU stamps times too late to compare
    # the first turn prefills ~1200 tokens; later ones only what the cache lacks (~150 tokens)
    assert all(t["ttft_p50_ms"] < turns[0]["ttft_p50_ms"] for t in turns[1:])
