"""The capacity search's decisions, without a server: bracketing, bisection, noise, budget."""

from __future__ import annotations

import json

import pytest
from helpers.processes import capacity
from helpers.results import read_steps, results_dir
from helpers.scenarios import write_scenario

from capacity_plugins.contracts.percentiles import share_interval
from capacity_plugins.contracts.slo import min_requests_to_show
from capacity_plugins.errors import UserError
from capacity_plugins.kinds.capacity_search import CapacitySearch
from capacity_plugins.scenario import load_scenario


def drive(search: CapacitySearch, passes_up_to: float, uncertain: set[float] = frozenset()) -> list[float]:
    """Measure levels as a server that meets the SLO up to `passes_up_to` would answer."""
    levels, level = [], search.first()
    while level is not None:
        levels.append(level)
        judged = "uncertain" if level in uncertain else ("pass" if level <= passes_up_to else "fail")
        level = search.next(level, judged, None if judged == "pass" else "ttft_p95_ms")
    return levels


def test_closed_loop_brackets_then_bisects_to_one_user():
    s = CapacitySearch(start=1, max_level=512, growth=2, tolerance=0.05, integer=True)
    assert drive(s, passes_up_to=23) == [1, 2, 4, 8, 16, 32, 24, 20, 22, 23]
    assert s.result()["bracket"] == [23, 24] and s.result()["converged"]


def test_open_loop_stops_within_tolerance():
    s = CapacitySearch(start=2.0, max_level=1000, growth=2, tolerance=0.05, integer=False)
    levels = drive(s, passes_up_to=37.0)
    lo, hi = s.result()["bracket"]
    assert lo <= 37.0 < hi and (hi - lo) / lo <= 0.05 and s.result()["converged"]
    assert len(levels) < 12  # a grid that fine from 2 to 64 would need ~70 steps


def test_never_failing_and_always_failing_are_answers_not_guesses():
    s = CapacitySearch(start=1, max_level=16, growth=2, tolerance=0.05, integer=True)
    assert drive(s, passes_up_to=1000) == [1, 2, 4, 8, 16]
    assert s.result()["bracket"] == [16, None] and "at least" in s.result()["stopped"]
    s = CapacitySearch(start=4, max_level=64, growth=2, tolerance=0.05, integer=True)
    assert drive(s, passes_up_to=0) == [4, 2, 1]
    assert s.result()["bracket"] == [None, 1] and "not met even at the lowest" in s.result()["stopped"]
    # Uncertain at the lowest level is not "not met": the search says it could not tell.
    s = CapacitySearch(start=1, max_level=64, growth=2, tolerance=0.05, integer=True)
    assert s.next(s.first(), "uncertain", "40 requests < load.min_requests 100") is None
    assert "could not be shown to meet the SLO (40 requests < load.min_requests 100)" in s.result()["stopped"]


def test_noise_stops_the_bracket_and_says_so():
    s = CapacitySearch(start=1, max_level=512, growth=2, tolerance=0.05, integer=True)
    levels = drive(s, passes_up_to=23, uncertain={24, 20})
    assert levels == [1, 2, 4, 8, 16, 32, 24, 20]
    result = s.result()
    assert result["bracket"] == [16, 20] and not result["converged"] and result["stopped"].startswith("noise")


def test_time_budget():
    s = CapacitySearch(start=1, max_level=512, growth=2, tolerance=0.05, integer=True, budget_s=100)
    level = s.first()
    assert s.next(level, "pass", spent_s=50) == 2
    assert s.next(2, "pass", spent_s=120) is None and "budget" in s.result()["stopped"]


def test_an_invalid_step_halts_the_search():
    s = CapacitySearch(start=1, max_level=512, growth=2, tolerance=0.05, integer=True)
    assert s.next(1, "pass") == 2
    s.halt(2, "client limited: generator event loop late")
    r = s.result()
    assert r["bracket"] == [1, None] and not r["converged"] and r["stopped"].startswith("invalid step at 2")
    assert r["steps"][-1] == {"level": 2, "judgement": "invalid", "limiting": "client limited: generator event loop late"}


def test_too_few_requests_per_step_is_refused_before_the_run(tmp_path):
    # Below 72 requests not even a perfect step can show 95 % attainment at 95 % confidence: the
    # search would stop at its first step, so the scenario is refused with the number it needs.
    need = min_requests_to_show(0.95, 0.95)
    assert share_interval(need, need, 0.95)[0] >= 0.95 > share_interval(need - 1, need - 1, 0.95)[0]
    path = tmp_path / "s.yaml"
    path.write_text("target: {url: embedded}\nload: {kind: capacity_search, min_requests: 50}\n")
    with pytest.raises(UserError, match=r"load.min_requests: 50 is too few .* at least 72 requests"):
        load_scenario(path)
    path.write_text("target: {url: embedded}\nload: {kind: capacity_search, min_requests: 72}\n")
    assert load_scenario(path).load.min_requests == 72


# -- end to end on the simulator ------------------------------------------------------------------



@pytest.mark.measured
@pytest.mark.slow
def test_search_finds_the_simulators_slot_count(tmp_path):
    # 4 slots, fixed 16-token outputs: up to 4 users no request waits (TTFT ≈ one prefill and one
    # decode step, ~20 ms); a fifth user waits a whole request (~0.2 s) about every cycle, so the
    # TTFT P95 limit of 100 ms holds at 4 users and not above: the answer is [4, 5].
    sc = write_scenario(
        tmp_path, "search",
        target={"url": "embedded", "simulator": {"max_num_seqs": 4, "decode_base_ms": 8, "decode_per_seq_ms": 1}},
        corpus={"path": "synthetic:prompt_tokens=32,output_tokens=16,n=2000,seed=1", "min_distinct": 1000},
        request={"max_tokens": 16, "ignore_eos": True, "timeout_s": 20},
        load={"kind": "capacity_search", "loop": "closed", "start": 1, "max_level": 64, "step_s": 4,
              "warmup_s": 1, "min_requests": 80, "max_loop_lag_p99_ms": 200},
        slo={"ttft_p95_ms": 100, "tpot_p95_ms": None},
    )
    r = capacity("run", str(sc), timeout=300)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    search = json.loads((folder / "steps.json").read_text())["search"]
    assert search["bracket"] == [4, 5] and search["converged"], search
    levels = [s["level"] for s in read_steps(folder)]
    assert levels[:4] == [1, 2, 4, 8] and set(levels) <= {1, 2, 4, 5, 6, 8}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["search"]["bracket"] == [4, 5]
    cap = summary["capacity"]
    assert cap["per_node_concurrency"] is None or 4 <= cap["per_node_concurrency"] <= 5


@pytest.mark.slow
def test_search_stops_at_a_client_limited_step(tmp_path):
    # A loop-lag limit no process can meet marks every step client limited: the search must stop
    # after the first one instead of steering by the generator's limit, and the run says why.
    sc = write_scenario(
        tmp_path, "search-starved",
        target={"url": "embedded", "simulator": {"max_num_seqs": 4}},
        request={"max_tokens": 8, "timeout_s": 20},
        load={"kind": "capacity_search", "loop": "closed", "start": 2, "max_level": 64, "step_s": 2,
              "warmup_s": 0.5, "max_loop_lag_p99_ms": 0.001, "min_requests": 80},
        slo={"ttft_p95_ms": 1000},
    )
    r = capacity("run", str(sc), timeout=180)
    folder = results_dir(r.stdout)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # no valid step: no decision
    assert [s["level"] for s in read_steps(folder)] == [2]
    search = json.loads((folder / "summary.json").read_text())["search"]
    assert search["stopped"].startswith("invalid step at 2: client limited") and not search["converged"]
    assert "→ invalid (client limited" in r.stdout
