"""The Pareto view: each step's output tokens/s per GPU against per user, computed from the step
rows of a written results folder (numbers known from how it was written), the frontier marked over
valid steps only, drawn in report.html and listed in summary.md; `capacity matrix` puts every
entry's points on one plane with one frontier."""

from __future__ import annotations

import pytest
from helpers.analysis_data import make_results

from capacity_plugins.analysis.pareto import mark_frontier
from capacity_plugins.analysis.pipeline import load_run, summarise
from capacity_plugins.contracts.pareto import ParetoPoint
from capacity_plugins.matrix import report as matrix_report
from capacity_plugins.matrix.entry import Outcome
from capacity_plugins.matrix.spec import Entry, Ready
from capacity_plugins.outputs import report_text
from capacity_plugins.outputs.sections import registered

pytestmark = pytest.mark.cpu


def point(x: float, y: float, *, valid: bool = True, level: float = 1.0) -> ParetoPoint:
    return ParetoPoint(level=level, per_gpu_tok_s=x, per_user_tok_s=y, valid=valid, slo_pass=True)


def test_the_frontier_is_the_valid_points_no_other_beats_on_both_axes():
    pts = [point(100, 50), point(200, 40), point(150, 30),  # (150, 30) is beaten by (200, 40)
           point(300, 10), point(300, 10), point(400, 60, valid=False), point(50, 50)]  # a tie; (50, 50) beaten
    mark_frontier(pts)
    assert [p.frontier for p in pts] == [True, True, False, True, True, False, False]
    # the invalid point beats them all but decides nothing: without it the frontier is the same


def test_a_sweeps_points_come_from_its_step_rows(tmp_path):
    folder = make_results(tmp_path / "run", levels=[1, 2, 4, 8], rps=[5, 10, 18, 20], e2e_p50_ms=[200, 200, 220, 400],
                          capacity={"gpus_per_node": 2, "replicas_behind_url": 2}, slo={"tpot_p95_ms": 8.0})
    summary = summarise(load_run(folder))
    p = summary.pareto
    assert p is not None and p.gpus == 4 and p.slo_per_user_tok_s == pytest.approx(125.0)
    assert [x.level for x in p.points] == [1, 2, 4, 8]
    for x, row in zip(p.points, summary.steps, strict=True):
        assert x.per_gpu_tok_s == pytest.approx(row.output_tokens_per_s / 4)
        assert x.per_user_tok_s == pytest.approx(1000.0 / row.tpot_p95_ms)
        lo, hi = x.per_user_tok_s_ci
        assert lo <= x.per_user_tok_s <= (hi if hi is not None else float("inf"))
        assert x.slo_pass == row.slo_pass and x.valid == row.valid
    assert any(x.frontier for x in p.points)
    md = report_text.markdown(summary)
    assert "## Pareto: interactivity against throughput" in md and p.line in md
    block = next(s for s in registered() if s.name == "pareto").html(summary)
    assert 'id="pareto"' in block and "data:image/png;base64," in block and 'id="pareto-points"' in block


def test_the_matrix_draws_every_entry_on_one_plane_with_one_frontier(tmp_path):
    slow = summarise(load_run(make_results(tmp_path / "a", levels=[1, 2, 4], rps=[4, 8, 10], e2e_p50_ms=400.0)))
    fast = summarise(load_run(make_results(tmp_path / "b", levels=[1, 2, 4], rps=[8, 16, 30], e2e_p50_ms=200.0)))

    def outcome(name: str, summary) -> Outcome:
        entry = Entry(name=name, url="http://127.0.0.1:1", command=None, ready=Ready(url=None, timeout_s=1.0),
                      teardown=None, gpus=1, gpu_hour_usd=None)
        return Outcome(entry=entry, folder=tmp_path, url=entry.url, gpus=1, gpu_hour_usd=None, summary=summary)

    across = matrix_report.pareto_across([outcome("slow", slow), outcome("fast", fast)])
    front = {name for name, points in across["entries"].items() for x in points if x["frontier"]}
    # the faster configuration has more per GPU *and* per user at every level: it alone is the frontier
    assert front == {"fast"}
    # each entry's own summary still marks its own frontier
    assert any(x.frontier for x in slow.pareto.points)
    doc = {"pareto": across}
    assert "Pareto frontier across the entries" in "\n".join(matrix_report._pareto_lines(doc))
    assert "data:image/png;base64," in matrix_report._pareto_html(doc)
