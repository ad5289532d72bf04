"""The matrix's table and ranking from summaries: columns, score basis, ties, separability, failures."""

from __future__ import annotations

import json

import pytest

from capacity_plugins.contracts.summary import Summary
from capacity_plugins.matrix import report
from capacity_plugins.matrix.table import PER_GPU, PER_USD, rank, row_from_summary


def summary(cap, ci, method="interpolated", last_pass=8, ttft=50.0, tpot=20.0, per_1m=1.5, knee=8) -> Summary:
    steps = [{"level": lv, "valid": True, "ttft_p95_ms": ttft if lv == last_pass else ttft * 10,
              "ttft_p95_ci_ms": [ttft * 0.9, ttft * 1.2], "tpot_p95_ms": tpot, "tpot_p95_ci_ms": [tpot, tpot]}
             for lv in (1, 2, 4, 8, 16)]
    return Summary.model_validate({
        "capacity": {"per_node_rps": cap, "per_node_rps_ci": ci, "method": method, "last_pass_level": last_pass,
                     "limiting_slo": "ttft_ms"},
        "knee": {"value": knee, "unit": "users", "interval": [knee, knee], "confidence": "high"},
        "cost": {"per_1m_output_tokens_usd": per_1m}, "steps": steps, "verdict": {"decision": "observe"}})


def row(name, cap, ci, gpus=1, price=2.0, status="ok", **kw):
    r = {"name": name, "status": status, "gpus": gpus, "gpu_hour_usd": price, "stage": None, "reason": None,
         "score": None, "score_ci": None, "rank": None, "teardown_problem": None}
    if status == "ok":
        r.update(row_from_summary(summary(cap, ci, **kw)))
    return r


def test_columns_read_the_slo_load_step_and_the_cost_interval():
    r = row_from_summary(summary(10.0, [8.0, 12.5], last_pass=4, ttft=40.0, per_1m=2.0))
    assert r["slo_load_level"] == 4 and r["ttft_p95_ms"] == 40.0 and r["ttft_p95_ci_ms"] == [36.0, 48.0]
    assert r["tpot_p95_ms"] == 20.0 and r["knee"] == 8 and r["knee_unit"] == "users"
    # cost ∝ 1 / capacity: the capacity's high end is the cost's low end
    assert r["cost_per_1m_output_tokens_ci_usd"] == pytest.approx([2.0 * 10 / 12.5, 2.0 * 10 / 8])
    lower = row_from_summary(summary(10.0, [9.0, 11.0], method="never_failed"))
    assert lower["capacity_is_lower_bound"] and lower["capacity_ci_rps"] == [9.0, None]
    none = row_from_summary(summary(0.0, [0.0, 0.0], method="fails_at_lowest_load", last_pass=None))
    assert none["slo_load_level"] is None and none["ttft_p95_ms"] is None


def test_ranked_by_capacity_per_gpu_hour_cost_not_by_capacity():
    # 16 rps on 2 GPUs costs more per request than 10 rps on one
    rows = [row("big", 16.0, [15.0, 17.0], gpus=2), row("small", 10.0, [9.5, 10.5], gpus=1)]
    best = rank(rows)
    assert best["basis"] == PER_USD and best["name"] == "small" and best["runner_up"] == "big"
    small, big = rows[1], rows[0]
    assert small["score"] == pytest.approx(10 * 3600 / 2.0) and big["score"] == pytest.approx(16 * 3600 / 4.0)
    assert small["rank"] == 1 and big["rank"] == 2
    assert best["separable"] is True and "do not overlap" in best["statement"]
    assert best["within_run_to_run_noise"] is False and "repeat the runs" not in best["statement"]


def test_a_separable_lead_smaller_than_run_to_run_noise_is_flagged():
    rows = [row("a", 10.5, [10.4, 10.6]), row("b", 10.0, [9.9, 10.1])]
    best = rank(rows)
    assert best["name"] == "a" and best["separable"] is True and best["within_run_to_run_noise"] is True
    assert "leads by 5%, less than the 10%" in best["statement"]


def test_overlapping_intervals_are_not_separable():
    rows = [row("a", 10.0, [8.0, 12.0]), row("b", 9.5, [7.0, 11.0])]
    best = rank(rows)
    assert best["name"] == "a" and best["separable"] is False and best["not_separable_from"] == ["b"]
    assert "not separable from it: the intervals overlap (a 14,400–21,600; b 12,600–19,800)" in best["statement"]


def test_a_runner_up_whose_capacity_is_a_lower_bound_is_never_separated():
    rows = [row("a", 20.0, [19.0, 21.0]), row("b", 10.0, [9.0, 11.0], method="never_failed")]
    best = rank(rows)
    assert best["name"] == "a" and best["separable"] is False and rows[1]["score_ci"][1] is None


def test_a_lower_ranked_lower_bound_also_keeps_the_winner_from_being_separable():
    # c ranks third, but its sweep never failed the SLO: its capacity may be above a's
    rows = [row("a", 20.0, [19.0, 21.0]), row("b", 10.0, [9.0, 11.0]),
            row("c", 8.0, [7.0, 9.0], method="never_failed")]
    best = rank(rows)
    assert best["name"] == "a" and best["runner_up"] == "b" and best["separable"] is False
    assert best["not_separable_from"] == ["c"] and "not separable from c: the intervals overlap" in best["statement"]
    assert "c 12,600–∞" in best["statement"] and best["statement"].endswith(
        "extend the sweep of c (its capacity is only a lower bound)")


def test_equal_scores_go_to_the_lower_ttft():
    rows = [row("slow", 10.0, [9.0, 11.0], ttft=80.0), row("fast", 10.0, [9.0, 11.0], ttft=30.0)]
    best = rank(rows)
    assert best["name"] == "fast" and best["tie_broken_by_ttft"] and "lower TTFT P95" in best["statement"]


def test_without_a_price_everywhere_the_basis_is_capacity_per_gpu():
    rows = [row("a", 10.0, [9.0, 11.0], gpus=2, price=None), row("b", 6.0, [5.0, 7.0], gpus=1, price=2.0)]
    best = rank(rows)
    assert best["basis"] == PER_GPU and best["name"] == "b" and rows[0]["score"] == pytest.approx(5.0)
    assert any("no gpu_hour_usd for a" in w for w in best["warnings"])


def test_failed_rows_are_never_ranked_and_zero_capacity_wins_nothing():
    rows = [row("down", None, None, status="failed"), row("slow", 0.0, [0.0, 0.0], method="fails_at_lowest_load",
                                                           last_pass=None)]
    best = rank(rows)
    assert rows[0]["rank"] is None and best["name"] is None and "no configuration met the SLO" in best["statement"]
    assert rank([row("down", None, None, status="failed")])["statement"].startswith("no entry completed")
    only = rank([row("down", None, None, status="failed"), row("up", 5.0, [4.0, 6.0])])
    assert only["name"] == "up" and only["separable"] is None and "only configuration" in only["statement"]


def test_markdown_and_html_carry_every_row_and_the_statement(tmp_path):
    rows = [row("a", 10.0, [8.0, 12.0]), row("down", None, None, status="failed")]
    rows[1].update(stage="ready", reason="command exited with code 3 before the server was ready: <boom>")
    doc = {"name": "m", "scenario": "s.yaml", "slo": {"ttft_p95_ms": 100.0, "tpot_p95_ms": None},
           "best": rank(rows), "entries": rows, "failed": ["down"]}
    md = report.markdown(doc)
    assert "| a | 1 | 10 [8, 12] | 8 users [8, 8] | 8 | 50 [45, 60] |" in md
    assert "| down | – | failed |" in md and "ready: command exited with code 3" in md
    assert "TTFT P95 ≤ 100 ms" in md and "Failed: down" in md
    page = report.to_html(doc)
    assert "&lt;boom&gt;" in page and "<boom>" not in page and "<svg" in page and doc["best"]["statement"] in page
    report.write(doc, tmp_path)
    assert json.loads((tmp_path / "matrix.json").read_text())["best"]["name"] == "a"
