"""`capacity analyze` as a user runs it: outputs, gates, and bad input → one line, exit 2."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers.analysis_data import make_results
from helpers.processes import capacity

from capacity_plugins.contracts.summary import RunFacts, Setting, StepSummary, Summary

# analyses of written results, no load and no timing: at the lowest CPU priority beside the
# measured sweeps, whose idle core it uses (tests/README.md)
pytestmark = pytest.mark.cpu

SEED = dict(levels=[1, 4, 8, 16], rps=[2, 7, 9, 9], e2e_p50_ms=[480, 620, 850, 1200], e2e_p99_ms=[490, 800, 1500, 2600],
            gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8])


def cli(*args: str) -> subprocess.CompletedProcess:
    return capacity(*args)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    p = make_results(tmp_path_factory.mktemp("run"), **SEED)
    r = cli("analyze", str(p), "--peak-qps", "30", "--current-nodes", "2", "--gpu-hour-usd", "2", "--redundancy", "0")
    return p, r


def test_outputs_written_and_html_self_contained(analysed):
    p, r = analysed
    assert r.returncode == 0, r.stderr
    assert "→ SCALE" in r.stdout.splitlines()[0]  # the plain answer, first
    page = (p / "report.html").read_text()
    assert 'data-decision="scale"' in page and "SCALE" in page
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 4  # throughput/latency, distributions, GPU/queue timeline, the Pareto view
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)
    assert not re.search(r'src="(?!data:)', page)  # nothing fetched from elsewhere
    for png in ("throughput_latency.png", "latency_distributions.png", "timeline.png"):
        assert (p / png).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((p / "summary.json").read_text())
    for key in ("steps", "knee", "capacity", "plan", "cost", "verdict", "checklist", "stability", "meta"):
        assert key in summary
    assert summary["plan"]["nodes"] == 5  # ceil(30 × 1.5 / 9) + 0
    md = (p / "summary.md").read_text()
    assert "| level |" in md and "Knee: 8 users" in md and "needs_human" in md


def test_gates_exit_3(analysed):
    p, _ = analysed
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "30", "--current-nodes", "2",
            "--fail-on-verdict", "scale")
    assert r.returncode == 3 and "verdict gate" in r.stderr
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "30", "--current-nodes", "2", "--fail-on-slo")
    assert r.returncode == 3 and "SLO gate" in r.stderr
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "10", "--current-nodes", "2",
            "--redundancy", "0", "--fail-on-slo", "--fail-on-verdict", "scale", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["decision"] == "dont_scale_yet"


def _one_line_error(r: subprocess.CompletedProcess, *must: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for m in must:
        assert m in lines[0], lines[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    _one_line_error(cli("analyze", str(tmp_path / "nope")), "nope")
    good = make_results(tmp_path / "good", **SEED)

    def variant(name: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f in good.iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        return d

    d = variant("no_requests")
    (d / "requests.jsonl").unlink()
    _one_line_error(cli("analyze", str(d)), "requests.jsonl")

    d = variant("corrupt_line")
    lines = (d / "requests.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _one_line_error(cli("analyze", str(d)), "requests.jsonl line 3")

    d = variant("wrong_type")
    lines = (d / "requests.jsonl").read_text().splitlines()
    rec = json.loads(lines[4])
    rec["e2e_ms"] = "slow"
    lines[4] = json.dumps(rec)
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _one_line_error(cli("analyze", str(d)), "requests.jsonl line 5", "e2e_ms")

    d = variant("bad_steps")
    (d / "steps.json").write_text('{"steps": [{"index": 0, "kind": "concurrency"}]}')
    _one_line_error(cli("analyze", str(d)), "steps.json", "level")

    d = variant("bad_slo")
    (d / "scenario.yaml").write_text("name: x\nslo:\n  ttft_p95_ms: -5\n")
    _one_line_error(cli("analyze", str(d)), "scenario.yaml", "slo.ttft_p95_ms")

    d = variant("bad_telemetry")
    (d / "telemetry_series.csv").write_text("when,what\n1,2\n")
    _one_line_error(cli("analyze", str(d)), "telemetry_series.csv")

    _one_line_error(cli("analyze", str(good), "--peak-qps", "lots"), "--peak-qps")
    _one_line_error(cli("analyze", str(good), "--safety-factor", "0.5"), "safety_factor")


def test_reports_open_with_the_answer_then_the_run_facts_and_never_print_a_password(tmp_path):
    lost = [{"worker": 2, "client_id": "w2", "lost_unix": 1_700_000_030.0, "reason": "no heartbeat"}]
    meta = {"model": "llama-3-8b", "target": "http://svc:S3cretPassw0rd@gpu-node:8000/v1?api_key=sk-ABCDEF123456&x=1",
            "start_unix": 1_700_000_000.0, "end_unix": 1_700_000_300.0, "workers_lost": lost, "versions": {}}
    p = make_results(tmp_path, meta=meta, scenario_extra={"target": {"url": "http://svc:<redacted>@gpu-node:8000"}},
                     slo={"ttft_p95_ms": 1500, "tpot_p95_ms": None, "e2e_p95_ms": 2000}, **SEED)
    r = cli("analyze", str(p), "--peak-qps", "30", "--current-nodes", "2")
    page, md, js = ((p / f).read_text() for f in ("report.html", "summary.md", "summary.json"))
    for text in (page, md, js, r.stdout, r.stderr):
        assert "S3cretPassw0rd" not in text and "sk-ABCDEF123456" not in text
    facts = page.split('<ul class="facts" id="facts">')[1].split("</ul>")[0]
    # the plain answer first, then what could not be trusted, the verdict's reasons, and the run facts
    assert page.index('id="answer"') < page.index('id="alerts"') < page.index('id="verdict"') < page.index('id="facts"')
    for must in ("2023-11-14 22:13:20 UTC", "5.0 min", "http://gpu-node:8000/v1?api_key=&lt;redacted&gt;&amp;x=1",
                 "real server", "llama-3-8b", "scenario: synthetic", "TTFT P95 ≤ 1500 ms (slo.ttft_p95_ms)",
                 "E2E P95 ≤ 2000 ms (slo.e2e_p95_ms)", "errors ≤ 1.0% (slo.error_rate)", "16: 93.7%",
                 "Intervals: 95% (verdict.confidence)", "Lost worker: 2"):
        assert must in facts, must
    assert md.index("**One node serves") < md.index("## Decision") < md.index("## Run")
    run_md = md.split("## Run")[1].split("## Load table")[0]
    assert "llama-3-8b" in run_md and "TTFT P95 ≤ 1500 ms" in run_md and "Lost worker: 2" in run_md
    assert "Invalid step" in run_md  # the lost worker's step decides nothing, and says why
    assert "(simulated)" not in page


def test_a_simulated_target_is_labelled_everywhere(tmp_path):
    p = make_results(tmp_path, scenario_extra={"target": {"url": "embedded", "simulator": {"max_num_seqs": 8}}}, **SEED)
    r = cli("analyze", str(p), "--peak-qps", "30", "--current-nodes", "2")
    assert r.returncode == 0, r.stderr
    page, md = (p / "report.html").read_text(), (p / "summary.md").read_text()
    for text in (page, md):
        assert "SIMULATED (scenario.yaml target.url: embedded" in text
        assert "GPU % (simulated)" in text
    assert "readings are simulated" in r.stdout.split("Capacity per node")[0]  # the console says so up front
    s = json.loads((p / "summary.json").read_text())
    assert s["run"]["simulated"] is True and any("embedded simulator" in w for w in s["warnings"])


def test_exit_codes_0_1_3(tmp_path):
    good = make_results(tmp_path / "good", **SEED)
    assert cli("analyze", str(good), "--quiet", "--no-report").returncode == 0
    # a gate that fails on a complete decision: 3
    r = cli("analyze", str(good), "--quiet", "--no-report", "--peak-qps", "30", "--fail-on-verdict", "scale")
    assert r.returncode == 3, r.stderr
    # the same gate on a run whose decision could not be completed: 1 wins
    cut = make_results(tmp_path / "cut", meta={"model": "m", "complete": False}, **SEED)
    r = cli("analyze", str(cut), "--quiet", "--no-report", "--peak-qps", "30", "--fail-on-verdict", "scale")
    assert r.returncode == 1 and "the decision could not be completed" in r.stderr
    # every step insufficient: 1, and the summary still written
    few = make_results(tmp_path / "few", levels=[1, 2, 4], rps=[2, 4, 8], window_s=10)
    r = cli("analyze", str(few), "--quiet")
    assert r.returncode == 1 and "no valid step" in r.stderr
    assert (few / "summary.json").exists() and (few / "report.html").exists()


def test_what_if_with_out_leaves_the_run_alone(tmp_path):
    # A what-if (another peak) written elsewhere: the run's own summary and report stay byte-equal.
    p = make_results(tmp_path / "run", **SEED)
    assert cli("analyze", str(p), "--quiet", "--peak-qps", "30", "--redundancy", "0").returncode == 0
    own = {f: (p / f).read_bytes() for f in ("summary.json", "summary.md", "report.html")}
    out = tmp_path / "what-if" / "peak60"
    r = cli("analyze", str(p), "--quiet", "--peak-qps", "60", "--redundancy", "0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert {f: (p / f).read_bytes() for f in own} == own
    assert json.loads((out / "summary.json").read_text())["plan"]["nodes"] == 10  # ceil(60 × 1.5 / 9)
    assert (out / "report.html").exists() and f"report: {out / 'report.html'}" in r.stdout
    # --out that is a file, or cannot be written: one line, exit 2, nothing analysed.
    _one_line_error(cli("analyze", str(p), "--out", str(p / "summary.json")), "--out", "not a folder")
    _one_line_error(cli("analyze", str(p), "--out", "/proc/forbidden"), "--out", "cannot write")


def test_help_names_the_positional_argument():
    r = cli("analyze", "--help")
    assert r.returncode == 0 and "RESULTS_DIR" in r.stdout and "a folder written by capacity run" in r.stdout


# ------------------------------------------------------------------ a report that reads at 1 280 px


def test_a_value_prints_to_the_precision_of_its_interval():
    from capacity_plugins.outputs.numbers import fmt_iv, fmt_level, fmt_num

    assert fmt_iv(8.3712, [7.566, 9.171]) == "8.4 [7.6–9.2]"  # width 1.6: one decimal
    assert fmt_iv(1176.2, [1149.0, 1251.3]) == "1,176 [1,149–1,251]"  # never rounded to tens
    assert fmt_iv(9.5402, [9.5301, 9.5563]) == "9.54 [9.53–9.56]"  # at most 3 significant digits
    assert fmt_iv(167.6, [128.4, None]) == "168 [128–∞]"  # an unbounded end: the finite one sets it
    assert fmt_iv(2.16, None) == "2.16" and fmt_iv(None, [1, 2]) == "–"
    assert fmt_level(10.9333) == "10.9" and fmt_level(16.0) == "16" and fmt_level(0.5) == "0.5"
    assert fmt_level(1250.4) == "1,250"
    assert fmt_num(5.0) == "5" and fmt_num(8.50678) == "8.51" and fmt_num(2824.7) == "2,825"


def test_the_load_table_shows_the_columns_a_planner_reads_and_the_rest_in_csv(analysed):
    import csv

    p, _ = analysed
    page, md = (p / "report.html").read_text(), (p / "summary.md").read_text()
    short = page.split('<table id="load-table">')[1].split("</tr>")[0]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", short)
    assert 8 <= len(heads) <= 10, heads
    for must in ("level", "throughput req/s", "TTFT P95 ms", "E2E P95 ms", "errors %", "SLO", "conclusion"):
        assert must in heads, (must, heads)
    md_head = next(line for line in md.splitlines() if line.startswith("| level |"))
    assert md_head.count("|") - 1 == len(heads)  # summary.md: the same short table ...
    assert "[steps.csv](steps.csv)" in md and 'href="steps.csv"' in page  # ... and a pointer to every column
    rows = list(csv.DictReader((p / "steps.csv").open()))
    summary = json.loads((p / "summary.json").read_text())
    assert [float(r["level"]) for r in rows] == [s["level"] for s in summary["steps"]]
    assert len(rows[0]) > 30 and {"rps_ci_lo", "rps_ci_hi", "ttft_p99_ms", "conclusion"} <= set(rows[0])
    assert float(rows[2]["rps"]) == summary["steps"][2]["rps"]  # as measured, not rounded


def test_the_plan_is_said_in_words(analysed):
    p, _ = analysed
    page, md = (p / "report.html").read_text(), (p / "summary.md").read_text()
    summary = json.loads((p / "summary.json").read_text())
    per_node = summary["capacity"]["per_node_rps"]
    from capacity_plugins.outputs.numbers import fmt_num

    line = (f"Plan: 30 req/s × 1.5 safety ÷ {fmt_num(per_node)} req/s per node = {fmt_num(30 * 1.5 / per_node)} "
            "→ 5 nodes (5 GPUs); you have 2")
    assert line in md and line in page
    for raw in ("peak_qps", "nodes_interval", "safety_factor", "per_1k_requests_usd", "5.00"):
        assert raw not in page.split('id="details"')[1].split("</ul>")[0], raw


def test_levels_print_as_a_reader_says_them(tmp_path):
    p = make_results(tmp_path, kind="rate", levels=[2.7333, 5.4667, 10.9333], rps=[2.7, 5.4, 10.8])
    assert cli("analyze", str(p), "--quiet").returncode in (0, 1)
    md, page = (p / "summary.md").read_text(), (p / "report.html").read_text()
    assert "| 10.9 |" in md and "10.9: " in md
    for text in (md, page):
        assert "10.9333" not in text and "5.4667" not in text


def test_every_slo_line_is_named_in_a_legend(tmp_path):
    import matplotlib.pyplot as plt

    from capacity_plugins.analysis.load import load_run
    from capacity_plugins.outputs.report import distributions_figure, throughput_latency_figure

    p = make_results(tmp_path, slo={"ttft_p95_ms": 1500, "tpot_p95_ms": 100, "e2e_p95_ms": 2000}, **SEED)
    assert cli("analyze", str(p), "--quiet").returncode == 0
    summary = Summary.load(p / "summary.json")
    for fig, want in ((throughput_latency_figure(summary), ["TTFT P95 SLO ≤ 1.5 s", "E2E P95 SLO ≤ 2 s",
                                                             "TPOT P95 SLO ≤ 100 ms"]),
                      (distributions_figure(load_run(p), summary), ["TTFT P95 SLO ≤ 1.5 s", "E2E P95 SLO ≤ 2 s"])):
        try:
            named = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
            dashed = [ln for ax in fig.axes if ax.get_ylabel() == "ms" for ln in ax.get_lines()
                      if ln.get_linestyle() == "--" and len(set(ln.get_ydata())) == 1]  # horizontal in ms: an SLO
            assert len(dashed) == len(want) and all(ln.get_label() in named for ln in dashed), (named, want)
            assert sorted(named_slo for named_slo in named if "SLO ≤" in named_slo) == sorted(want)
        finally:
            plt.close(fig)


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible texts (tick labels, annotations, titles) whose boxes overlap, per axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        texts = [t for t in [*ax.get_xticklabels(), *ax.texts, ax.title] if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        out += [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    return out


@pytest.mark.parametrize("levels,arms", [([1, 2, 4, 8, 16, 32], False), ([1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64], False),
                                         ([1, 4, 8, 16], True)])
def test_where_ttft_goes_has_no_overlapping_labels(levels, arms):
    import matplotlib.pyplot as plt

    from capacity_plugins.outputs.report_ttft import plot_ttft_breakdown

    def row(lv: float, arm: str | None, client: float) -> StepSummary:
        return StepSummary(level=lv, arm=arm, client_ttft_mean_ms=client, server_queue_mean_ms=client * 0.6,
                           server_prefill_mean_ms=client * 0.3, server_ttft_mean_ms=client - 0.6,
                           client_remainder_ms=0.6)

    rows = [row(lv, arm, 30.0 * i + 2825.0 * (lv >= 16)) for i, lv in enumerate(levels)
            for arm in (("distinct", "shared_prefix") if arms else (None,))]
    fig = plot_ttft_breakdown(Summary(steps=rows, run=RunFacts(simulated=True)))
    try:
        assert _overlaps(fig) == []
        assert len(fig.axes[1].texts) == len(rows)  # each bar's total, once
    finally:
        plt.close(fig)


def test_the_settings_that_decided_are_a_folded_list_not_part_of_the_answer(analysed):
    from capacity_plugins.outputs.report import html_page
    from capacity_plugins.outputs.report_text import markdown

    p, _ = analysed
    summary = Summary.load(p / "summary.json")
    summary.verdict.settings = [Setting(key="verdict.gpu_busy_pct", value=85.0, meaning="GPU counted busy above this (%)"),
                                Setting(key="capacity.redundancy", value=1, meaning="spare nodes added on top")]
    page, md = html_page(summary, {}), markdown(summary)
    folded = page.split('<details id="settings"><summary>Settings that decided this</summary>')[1].split("</details>")[0]
    assert "<td class=l>verdict.gpu_busy_pct</td><td>85</td>" in folded and "<td>1</td>" in folded
    assert "verdict.gpu_busy_pct" not in page.split('id="answer">')[1].split("</p>")[0]
    assert "- verdict.gpu_busy_pct = 85: GPU counted busy above this (%)" in md.split("### Settings that decided this")[1]
    summary.verdict.settings = None
    assert 'id="settings"' not in html_page(summary, {}) and "Settings that decided" not in markdown(summary)
