"""`capacity compare`: the before/after table of docs/capacity.md, each change judged against the noise."""

from __future__ import annotations

import json

import pytest
from helpers.analysis_data import make_queue_results, make_repeat_set, make_results
from helpers.processes import capacity

from capacity_plugins import analyze
from capacity_plugins.analysis.compare import compare, load_summary
from capacity_plugins.errors import UserError


def _pair(tmp_path):
    # a worked before/after example: QPS 9 → 18, P99 2600 → 1400 ms, P50 1200 → 680 ms, GPU 91 → 74 %
    before = make_results(tmp_path / "before", levels=[4, 8, 16], rps=[7, 9, 9], e2e_p50_ms=[620, 850, 1200],
                          e2e_p99_ms=[800, 1500, 2600], gpu_util=[72, 89, 91],
                          capacity={"gpu_hour_usd": 2.0})
    after = make_results(tmp_path / "after", levels=[4, 8, 16], rps=[7, 13, 18], e2e_p50_ms=[500, 560, 680],
                         e2e_p99_ms=[600, 900, 1400], gpu_util=[50, 65, 74],
                         capacity={"gpu_hour_usd": 2.0})
    analyze(before)
    analyze(after)
    return before, after


def test_before_after_rows_judged_below_saturation(tmp_path):
    before, after = _pair(tmp_path)
    c = compare(load_summary(before), load_summary(after))
    rows = {r.metric: r for r in c.rows}
    # `before` saturates at 8 (9 → 9 rps): its level 16 is an overloaded queue, not a measurement of
    # the server, so the comparison happens at 8, the highest level both measured below saturation
    assert c.compared_level == 8 and "below saturation" in c.compared_where
    # (the throughput estimator is the analysis's: within a few % of the curve it was given)
    assert rows["QPS at compared level"].before == pytest.approx(9, rel=0.05)
    assert rows["QPS at compared level"].after == pytest.approx(13, rel=0.1)
    assert rows["QPS at compared level"].verdict == "better"
    assert rows["E2E P99 ms"].verdict == "better" and rows["E2E P50 ms"].verdict == "better"
    assert rows["capacity per node under SLO (rps)"].verdict == "better"
    assert rows["cost per 1k requests USD"].verdict == "better"
    assert rows["GPU util %"].before == 89 and rows["GPU util %"].after == 65
    assert rows["cache hit rate"].verdict == "unknown"
    assert c.overall == "improved" and any("used better" in a for a in c.advice)
    # every verdict beat its noise: single runs add the minimum detectable difference (10 %)
    q = rows["QPS at compared level"]
    assert q.noise >= 0.10 * q.before and abs(q.after - q.before) > q.noise
    back = compare(load_summary(after), load_summary(before))
    assert back.overall == "regressed"


def test_two_runs_of_the_same_server_compare_within_noise(tmp_path):
    # the same 4-slot server twice (different random service times, CV 1.5, 15 s steps): nothing changed
    slo = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 400.0}
    band_fooled = 0
    for seed in range(6):
        a, b = (make_queue_results(tmp_path / f"{x}{seed}", levels=[1, 2, 4, 8], slots=4, window_s=15, service_cv=1.5,
                                   seed=2 * seed + j, slo=slo) for j, x in enumerate("ab"))
        sa, sb = load_summary(a), load_summary(b)
        c = compare(sa, sb)
        assert c.overall == "within noise", (seed, c.rows)
        assert not [r for r in c.rows if r.verdict in ("better", "worse")], c.rows
        # nothing moved: the bottom line lists nothing, and says so
        assert c.moved == [] and c.bottom_line.startswith("within noise — nothing moved beyond the noise; ")
        # ... and what would tell: single runs carry the 10 % allowance that only repeats replace
        assert "to tell: single runs cannot show a change under 10%" in c.bottom_line
        assert "--repeat 3" in c.bottom_line
        knees = [s.knee.value or float("inf") for s in (sa, sb)]
        assert c.compared_level is not None and c.compared_level <= min(knees)
        # the old rule (a change beyond ±5 % is real) would have called some of these better or worse
        band_fooled += any(r.change is not None and abs(r.change) > 0.05 for r in c.rows)
    assert band_fooled >= 2


def test_a_real_change_in_a_noisy_server_is_seen(tmp_path):
    slo = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 400.0}
    a = make_queue_results(tmp_path / "a", levels=[1, 2, 4, 8], slots=4, window_s=30, seed=1, slo=slo)
    b = make_queue_results(tmp_path / "b", levels=[1, 2, 4, 8], slots=4, window_s=30, seed=2, slo=slo,
                           service_ms=68.0 / 1.5)  # 1.5× faster service
    c = compare(load_summary(a), load_summary(b))
    rows = {r.metric: r for r in c.rows}
    assert rows["QPS at compared level"].verdict == "better" and c.overall == "improved"


def test_a_run_without_valid_steps_is_refused_with_exit_2(tmp_path):
    good = make_results(tmp_path / "good", levels=[1, 2, 4], rps=[5, 10, 20])
    empty = make_results(tmp_path / "empty", levels=[1, 2, 4], rps=[0, 0, 0])
    with pytest.raises(UserError, match="after: no valid step"):
        compare(load_summary(good), load_summary(empty))
    r = capacity("compare", str(good), str(empty))
    assert r.returncode == 2 and "no valid step" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (empty / "summary.json").exists()  # refused before any side effect


def test_repeat_sets_compare_on_their_run_to_run_spread(tmp_path):
    slo = {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 400.0}
    a = make_repeat_set(tmp_path / "a", 3, lambda p, i: make_queue_results(
        p, levels=[1, 2, 4, 8], slots=4, window_s=30, seed=10 + i, slo=slo))
    b = make_repeat_set(tmp_path / "b", 3, lambda p, i: make_queue_results(
        p, levels=[1, 2, 4, 8], slots=4, window_s=30, seed=20 + i, slo=slo))
    c = compare(load_summary(a), load_summary(b))
    assert c.noise_basis.before == "repeats" and c.noise_basis.after == "repeats"
    assert c.overall == "within noise", c.rows
    assert c.bottom_line.endswith("to tell: more repeats on each side would narrow it (the interval shrinks with √repeats)")
    faster = make_repeat_set(tmp_path / "f", 3, lambda p, i: make_queue_results(
        p, levels=[1, 2, 4, 8], slots=4, window_s=30, seed=30 + i, slo=slo, service_ms=68.0 / 1.5))
    c = compare(load_summary(a), load_summary(faster))
    assert c.overall == "improved"


def test_cli_prints_table_and_bad_input_exits_2(tmp_path):
    before, after = _pair(tmp_path)
    r = capacity("compare", str(before), str(after), "--out", str(tmp_path / "c.json"))
    assert r.returncode == 0, r.stderr
    assert "| metric | before | after | change | ± noise | verdict |" in r.stdout
    assert "\nOverall: improved — capacity +" in r.stdout and "nothing worse beyond noise\n" in r.stdout
    assert json.loads((tmp_path / "c.json").read_text())["overall"] == "improved"
    r = capacity("compare", str(before), str(tmp_path / "missing"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# --- what moved (issue 25, obs. 6): the bottom line names every change beyond noise ---------------

SLO_TTFT = {"ttft_p95_ms": 1500.0, "tpot_p95_ms": None, "e2e_p95_ms": None}


def _slots(path, slots, seed, service_ms=950.0, **kw):
    """The simulator's shape: 1 → 32 closed-loop users, 12-s steps, ~1 s per request; `slots` batch slots."""
    return make_queue_results(path, levels=[1, 2, 4, 8, 16, 32], slots=slots, service_ms=service_ms, service_cv=0.5,
                              window_s=12, seed=seed, slo=SLO_TTFT, **kw)


def _said(c):
    """Every row judged beyond its noise is in the bottom line, with its direction, change and interval."""
    moved = [r for r in c.rows if r.verdict in ("better", "worse")]
    assert [m.metric for m in c.moved] == [r.metric for r in moved if r.verdict == "worse"] + \
        [r.metric for r in moved if r.verdict == "better"]
    for m in c.moved:
        assert m.text in c.bottom_line and m.text.endswith(m.verdict)
        lo, hi = m.change_ci
        assert lo <= m.change <= hi and (lo > 0 or hi < 0), m  # beyond noise: the interval excludes no change
        assert lo >= -1.0  # nothing compared can fall by more than 100 %
    return moved


def test_more_batch_slots_says_what_improved(tmp_path):
    # observation 6: before 8 batch slots, after 16 (each request slower in the bigger batch: +23 %
    # capacity in closed form). Yesterday's bottom line said "Overall: within noise" under a table
    # whose TTFT P95 row said −80 % better: only the QPS and capacity rows could make it "improved".
    before = _slots(tmp_path / "slots8", 8, seed=4)
    after = _slots(tmp_path / "slots16", 16, seed=5, service_ms=950.0 * 16 / 8 / 1.23)
    c = compare(load_summary(before), load_summary(after))
    assert c.overall == "improved", c.rows
    moved = _said(c)
    assert moved and all(r.verdict == "better" for r in moved), c.rows
    assert c.bottom_line.startswith("improved — ") and c.bottom_line.endswith("; nothing worse beyond noise")
    assert "within noise" not in c.bottom_line
    # the level rows name the level they were measured at
    for m in c.moved:
        if m.metric in ("QPS at compared level", "E2E P50 ms", "E2E P99 ms", "TTFT P95 ms"):
            assert f"at level {c.compared_level:g} " in m.text
    r = capacity("compare", str(before), str(after))
    assert r.returncode == 0, r.stderr  # compared: exit 0 whatever the outcome (docs/exit-codes.md)
    assert f"\nOverall: {c.bottom_line}\n" in r.stdout


def test_the_same_run_twice_is_within_noise(tmp_path):
    run = _slots(tmp_path / "run", 8, seed=4)
    c = compare(load_summary(run), load_summary(run))
    assert c.overall == "within noise" and c.moved == [] and not _said(c)
    assert c.bottom_line.startswith("within noise — nothing moved beyond the noise; to tell: ")
    assert all(r.change in (0.0, None) for r in c.rows)


def test_a_regression_is_said_as_worse(tmp_path):
    # 16 slots → 8 slots of the same speed: half the capacity, said as worse, and nothing better
    big = _slots(tmp_path / "big", 16, seed=6)
    small = _slots(tmp_path / "small", 8, seed=7)
    c = compare(load_summary(big), load_summary(small))
    moved = _said(c)
    assert moved and all(r.verdict == "worse" for r in moved), c.rows
    assert c.overall == "regressed" and c.bottom_line.startswith("regressed — capacity −")
    assert c.bottom_line.endswith("; nothing better beyond noise")
    cap = next(m for m in c.moved if m.metric == "capacity per node under SLO (rps)")
    assert cap.verdict == "worse" and cap.change_ci[1] < 0


def test_a_mixed_change_says_the_worse_first(tmp_path):
    # twice the slots on a GPU that costs three times as much: capacity doubles, each request costs 50 % more
    cheap = _slots(tmp_path / "cheap", 8, seed=8, capacity={"gpu_hour_usd": 2.0})
    dear = _slots(tmp_path / "dear", 16, seed=9, capacity={"gpu_hour_usd": 6.0})
    c = compare(load_summary(cheap), load_summary(dear))
    rows = {r.metric: r for r in c.rows}
    assert rows["capacity per node under SLO (rps)"].verdict == "better"
    assert rows["cost per 1k requests USD"].verdict == "worse"
    assert c.overall == "regressed"  # a worse row is never hidden behind a better one
    _said(c)
    assert c.bottom_line.startswith("regressed — cost per 1k requests +")
    line = c.bottom_line
    assert line.index(" worse") < line.index("capacity +") and "nothing" not in line
    # the cost carries the capacity's interval: its noise is more than the minimum detectable difference alone
    assert rows["cost per 1k requests USD"].noise > 0.10 * rows["cost per 1k requests USD"].before
