"""The prefix-cache probe (`load.kind: cache_probe`): the scenario model, its steps, the cache arm
on a generator, the analysis's comparison of the arms, and end to end on the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.analysis_data import make_results
from helpers.processes import capacity
from helpers.results import read_steps, results_dir
from helpers.scenarios import write_scenario

from capacity_plugins import analyze
from capacity_plugins.corpus import load_corpus
from capacity_plugins.corpus.cache_arms import PROBE_TAG, ArmSpec
from capacity_plugins.errors import UserError
from capacity_plugins.scenario import CacheProbeLoad, parse_scenario
from capacity_plugins.simulator.truth import read_truth


def probe(load: dict | None = None, **sections) -> object:
    data = {"target": {"url": "embedded"}, "load": {"kind": "cache_probe", **(load or {})}, **sections}
    return parse_scenario(data, "probe.yaml")


# -- scenario ---------------------------------------------------------------------------------------


def test_defaults_and_the_embedded_simulators_cache_turned_on():
    s = probe()
    assert isinstance(s.load, CacheProbeLoad)
    assert (s.load.loop, s.load.levels, s.load.arm, s.load.prefix_tokens, s.load.pool_size) == \
        ("closed", [1.0, 4.0], "shared_prefix", 1024, None)
    assert s.target.simulator == {"prefix_cache": True} and not s.open_loop
    # The copy in the results folder says so, and reads back the same.
    again = parse_scenario(yaml.safe_load(s.resolved_yaml()), "copy.yaml")
    assert again.load == s.load and again.target.simulator == {"prefix_cache": True}
    # An explicit setting wins (a probe of a server without a cache), and a real target is left alone.
    off = probe(target={"url": "embedded", "simulator": {"prefix_cache": False, "max_num_seqs": 4}})
    assert off.target.simulator == {"prefix_cache": False, "max_num_seqs": 4}
    assert probe(target={"url": "http://gpu:8000"}).target.simulator is None
    rep = probe({"arm": "repeat", "loop": "open", "levels": [0.5, 2]})
    assert (rep.load.pool_size, rep.load.prefix_tokens, rep.open_loop) == (8, None, True)


@pytest.mark.parametrize("load, message", [
    ({"pool_size": 4}, "load.pool_size: only used with arm: repeat (arm is shared_prefix)"),
    ({"arm": "repeat", "prefix_tokens": 512}, "load.prefix_tokens: only used with arm: shared_prefix"),
    ({"levels": [1, 2.5]}, "load.levels: closed-loop levels are users: whole numbers"),
    ({"levels": []}, "load.levels: List should have at least 1 item"),
    ({"levels": [2, 2]}, "load.levels: each level once: both arms run at every level"),
    ({"arm": "warm"}, "load.arm: Input should be 'shared_prefix' or 'repeat'"),
    ({"prefix_tokens": 8}, "load.prefix_tokens: Input should be greater than or equal to 16"),
    ({"step_s": 5, "warmup_s": 5}, "load: warmup_s (5) must be shorter than step_s (5)"),
    ({"levls": [1]}, "load.levls: unknown key for load kind cache_probe"),
])
def test_bad_keys_are_one_line_naming_the_field(load, message):
    with pytest.raises(UserError) as e:
        probe(load)
    assert str(e.value).startswith(f"probe.yaml: {message}") and "\n" not in str(e.value)


@pytest.mark.slow  # `capacity run`
def test_cli_bad_probe_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: {url: embedded}\nload: {kind: cache_probe, arm: repeat, prefix_tokens: 256}\n")
    r = capacity("run", str(bad), timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml: load.prefix_tokens: only used with arm: shared_prefix" in lines[0]


# -- steps ------------------------------------------------------------------------------------------


def test_each_level_runs_the_distinct_arm_then_the_cache_arm():
    from capacity_plugins.rehearsal.shapes import plan_steps

    s = probe({"levels": [1, 4], "step_s": 6, "warmup_s": 1, "prefix_tokens": 512}, corpus={"seed": 5})
    plans = plan_steps(s)
    assert [(p.kind, p.level, p.users, p.arm) for p in plans] == [
        ("concurrency", 1, 1, "distinct"), ("concurrency", 1, 1, "shared_prefix"),
        ("concurrency", 4, 4, "distinct"), ("concurrency", 4, 4, "shared_prefix")]
    assert [p.arm_spec for p in plans[::2]] == [None, None]
    assert ArmSpec.from_message(plans[1].arm_spec) == ArmSpec("shared_prefix", prefix_tokens=512, seed=5)
    assert all(p.duration_s == 6 and p.warmup_s == 1 for p in plans)
    opened = plan_steps(probe({"loop": "open", "levels": [2.5], "arm": "repeat", "pool_size": 3}))
    assert [(p.kind, p.target_rps, p.arm) for p in opened] == [("rate", 2.5, "distinct"), ("rate", 2.5, "repeat")]


def test_steps_json_rows_carry_the_arm_and_older_rows_still_read():
    from capacity_plugins.contracts.steps import StepRow
    from capacity_plugins.rehearsal.steps import Step, StepAccounting, StepTimeline

    timeline = StepTimeline()
    step = Step(0, "concurrency", 2.0, 100.0, 101.0, 110.0, arm="repeat", arm_spec={"arm": "repeat"})
    timeline.upsert(Step.from_message(step.to_message()))  # as a worker receives it
    assert timeline.get(0) == step
    row = StepAccounting(timeline).row(step)
    assert row["arm"] == "repeat" and "arm_spec" not in row
    assert StepRow.from_json(row, "steps[0]").arm == "repeat"
    old = {k: v for k, v in row.items() if k != "arm"}
    assert StepRow.from_json(old, "steps[0]").arm is None


def test_a_generator_sends_the_cache_arm_only_while_a_cache_arm_step_runs():
    from capacity_plugins.rehearsal.cache_arm import CacheArmSource
    from capacity_plugins.rehearsal.steps import Step, StepTimeline

    class Ctx:
        corpus = load_corpus("synthetic:prompt_tokens=200,output_tokens=4,n=50,seed=2", min_distinct=10)
        worker_index, worker_count = 1, 2

    timeline = StepTimeline()
    timeline.upsert(Step(0, "concurrency", 1, 0.0, 1.0, 10.0, drain_end_unix=11.0, arm="distinct"))
    timeline.upsert(Step(1, "concurrency", 1, 11.0, 12.0, 20.0, arm="shared_prefix",
                         arm_spec=ArmSpec("shared_prefix", prefix_tokens=64).to_message()))
    source = CacheArmSource(Ctx(), lambda: timeline)  # type: ignore[arg-type]
    assert source(5.0) is None and source(10.5) is None  # the distinct arm, and its drain
    got = [source(15.0) for _ in range(3)]
    assert all(s is not None and s.text.startswith(PROBE_TAG) and s.id.endswith("+prefix") for s in got)
    assert source.prepare(timeline.get(1).arm_spec) is source.prepare(timeline.get(1).arm_spec)  # built once


# -- analysis ---------------------------------------------------------------------------------------

def probe_folder(path: Path, *, cache_e2e: float, hit: tuple[float, float] | None = (0.0, 0.75),
                 step_extra: list[dict] | None = None) -> Path:
    """Two levels × two arms; the distinct arm's E2E P50 500 ms (TTFT a quarter of it), the cache
    arm's `cache_e2e`; 600 requests a step, so every P95 is bounded."""
    arms = ["distinct", "shared_prefix", "distinct", "shared_prefix"]
    extra = [{"arm": a, **((step_extra or [{}] * 4)[i])} for i, a in enumerate(arms)]
    make_results(path, levels=[1, 1, 4, 4], rps=[10.0] * 4, e2e_p50_ms=[500.0, cache_e2e] * 2,
                 e2e_p99_ms=[560.0, cache_e2e * 1.12] * 2, step_extra=extra,
                 load={"kind": "cache_probe", "levels": [1, 4], "prefix_tokens": 1536},
                 meta={"model": "m", "cache_probe": {"arm": "shared_prefix", "prefix_tokens": 1536, "pool_size": 8,
                                                     "seed": 42, "shared_tokens_mean": 1536.0,
                                                     "prompt_tokens_mean": 2048.0, "full_prefix_share": 1.0}})
    if hit is not None:
        steps = json.loads((path / "steps.json").read_text())["steps"]
        rows = [f"{s['warmup_end_unix'] + j + 0.5},{s['index']},srv,m,prefix_cache_hit_rate,"
                f"{hit[s['index'] % 2]},ratio" for s in steps for j in range(5)]
        (path / "telemetry_series.csv").write_text("unix,step,host,device,series,value,unit\n" + "\n".join(rows) + "\n")
    return path


def test_analysis_reports_the_cache_effect_per_level_and_counts_the_distinct_arm_only(tmp_path):
    summary = analyze(probe_folder(tmp_path / "run", cache_e2e=150.0))
    probe = summary.cache_probe
    assert probe.status == "cache_flatters" and probe.counted_arm == "distinct"
    assert [e.level for e in probe.levels] == [1, 4] and all(e.compared for e in probe.levels)
    e = probe.levels[0]
    # TTFT is a quarter of E2E in this folder: P50s of 125 and 37.5 ms, as written.
    assert e.distinct.ttft_p50_ms == pytest.approx(125.0, rel=0.01)
    assert e.cache.ttft_p50_ms == pytest.approx(37.5, rel=0.01)
    p95 = e.deltas["ttft_p95_ms"]
    assert p95.change == pytest.approx(0.3 - 1, abs=0.02) and p95.judgement == "cache_flatters"
    assert p95.noise is not None and p95.noise < abs(p95.distinct - p95.cache)
    assert e.distinct.prefix_cache_hit_rate == 0.0 and e.cache.prefix_cache_hit_rate == 0.75
    assert probe.answer.startswith("TTFT P95 is 70 % lower with shared prefixes (at 1 users: ")
    assert "hit rate in the cache arm was 75%" in probe.answer and "overstate capacity" in probe.answer
    # Capacity, knee and plan: the distinct arm's steps only, and the summary says so.
    rows = summary.steps
    assert [r.arm for r in rows] == ["distinct", "shared_prefix", "distinct", "shared_prefix"]
    assert [r.valid for r in rows] == [True, False, True, False]
    assert rows[1].invalid_reasons[0].startswith("cache arm (shared_prefix)")
    assert summary.capacity.excluded_steps == [1, 3]
    assert any("capacity counts the distinct arm only" in n for n in summary.capacity.notes)
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "## Prefix-cache probe" in md and "| 1 users | shared_prefix |" in md and "beyond noise" in md
    assert "Prefix-cache probe: TTFT P95 is 70 % lower" in md  # in the decision's headline too
    page = (tmp_path / "run" / "report.html").read_text()
    assert 'id="cache-probe"' in page and "<th>arm</th>" in page


def test_no_effect_is_said_as_such_and_a_cache_that_serves_nothing_is_named(tmp_path):
    summary = analyze(probe_folder(tmp_path / "run", cache_e2e=510.0, hit=(0.0, 0.0)))
    probe = summary.cache_probe
    assert probe.status == "no_effect"
    assert all(e.deltas["ttft_p95_ms"].judgement == "within noise" for e in probe.levels)
    assert probe.answer.startswith("No cache effect beyond noise: TTFT P95 +2 % ± ")
    assert probe.answer.endswith("is prefix caching off?")
    # Without scraped server metrics the hit rate is unknown, not zero.
    probe = analyze(probe_folder(tmp_path / "bare", cache_e2e=510.0, hit=None)).cache_probe
    assert probe.levels[0].cache.prefix_cache_hit_rate is None and "hit rate" not in probe.answer


def test_whether_the_server_says_its_prefix_caching_is_on():
    from capacity_plugins.analysis.cache_probe import server_prefix_caching
    from capacity_plugins.contracts.meta import Meta

    def meta(*flags: str) -> Meta:
        targets = {f"http://s{i}/metrics": {"info": {"vllm:cache_config_info": {"enable_prefix_caching": f}}}
                   for i, f in enumerate(flags)}
        return Meta.model_validate({"telemetry": {"provenance": {"targets": targets}}})

    assert server_prefix_caching(meta("True")) is True and server_prefix_caching(meta("False")) is False
    assert server_prefix_caching(meta("False", "True")) is True  # one server caching is enough to flatter
    assert server_prefix_caching(Meta()) is None
    assert server_prefix_caching(Meta.model_validate({"telemetry": {"provenance": {}}})) is None


def test_an_unsound_step_leaves_its_level_uncompared(tmp_path):
    limited = {"client_limited": True, "client_limited_reason": "generator CPU stayed above 90 %"}
    summary = analyze(probe_folder(tmp_path / "run", cache_e2e=150.0, step_extra=[{}, {}, {}, limited]))
    probe = summary.cache_probe
    assert [e.compared for e in probe.levels] == [True, False]
    assert any(n.startswith("level 4 users: not compared (client limited") for n in probe.notes)
    assert probe.status == "cache_flatters"  # level 1 still answers


def test_where_ttft_goes_draws_a_bar_per_arm():
    # Both arms of a level are steps at the same level: each keeps its own bar, labelled with its arm.
    import matplotlib.pyplot as plt

    from capacity_plugins.contracts.summary import StepSummary, Summary
    from capacity_plugins.outputs.report_ttft import plot_ttft_breakdown

    rows = [StepSummary(level=lv, arm=arm, client_ttft_mean_ms=t, server_queue_mean_ms=1.0, server_prefill_mean_ms=t - 5,
                        server_ttft_mean_ms=t - 2, client_remainder_ms=2.0)
            for lv in (1, 4) for arm, t in (("distinct", 160.0), ("shared_prefix", 20.0))]
    fig = plot_ttft_breakdown(Summary(steps=rows))
    try:
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert ticks == ["1\ndistinct", "1\nshared_prefix", "4\ndistinct", "4\nshared_prefix"]
        assert len(fig.axes[1].patches) == 4 * 4  # queue, prefill, server rest, client rest per step
    finally:
        plt.close(fig)


def test_other_runs_have_no_probe_and_no_arm_column(tmp_path):
    summary = analyze(make_results(tmp_path / "run", levels=[1, 2, 4], rps=[2.0, 4.0, 8.0]))
    assert summary.cache_probe is None and all(r.arm is None for r in summary.steps)
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "Prefix-cache probe" not in md and "| arm |" not in md


# -- end to end on the simulator ------------------------------------------------------------------

# 2048-token prompts (2054 with the chat template) of plain English, 1536 of them shared; prefill
# 10 000 tokens/s. With one user every request joins an idle engine, so TTFT = one step = decode
# (8 + 1 ms) + its uncached prompt / R: the shared arm's is lower by exactly 1536 / R = 153.6 ms,
# and the simulator's hit rate in that arm is 1536 / 2054 = 0.75 per request.
PREFILL_RATE, PREFIX = 10000.0, 1536
PROBE_SIM = {"max_num_seqs": 4, "prefill_tokens_per_s": PREFILL_RATE}
# Generous client limits: the suite shares a busy machine, and this test is about the arms, not the client.
PROBE_LOAD = {"kind": "cache_probe", "levels": [1], "step_s": 4, "warmup_s": 1, "min_requests": 10,
              "max_loop_lag_p99_ms": 200, "max_schedule_lag_p99_ms": 1000}
PROBE_CORPUS = {"path": "synthetic:prompt_tokens=2048,output_tokens=4,n=1000,seed=1", "min_distinct": 1000}


def run_probe(tmp_path: Path, name: str, simulator: dict, load: dict) -> tuple[Path, dict, str]:
    sc = write_scenario(tmp_path, name, target={"url": "embedded", "simulator": simulator}, corpus=PROBE_CORPUS,
                        request={"max_tokens": 4, "ignore_eos": True, "timeout_s": 20},
                        load={**PROBE_LOAD, **load}, slo={"ttft_p95_ms": 2000, "tpot_p95_ms": None})
    r = capacity("run", str(sc), timeout=300)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    return folder, json.loads((folder / "summary.json").read_text()), r.stdout


@pytest.mark.measured
@pytest.mark.slow
def test_shared_prefixes_cut_ttft_by_the_cached_prefill_time(tmp_path):
    folder, summary, out = run_probe(tmp_path, "probe", PROBE_SIM, {"prefix_tokens": PREFIX})
    assert [s["arm"] for s in read_steps(folder)] == ["distinct", "shared_prefix"]
    # The server's own account: nothing cached in the distinct arm, the prefix in the shared arm
    # (all but its very first request, which put the prefix in the cache).
    truth = read_truth(folder / "simulator_truth.jsonl", 1)
    distinct = [t["cached_tokens"] for t in truth if t["prompt_tokens"] > 100 and t["cached_tokens"] == 0]
    shared = [t["cached_tokens"] for t in truth if t["cached_tokens"]]
    assert shared and set(shared) == {PREFIX} and len(distinct) >= 10
    probe = summary["cache_probe"]
    level = probe["levels"][0]
    assert level["compared"] and probe["status"] == "cache_flatters", probe
    p50 = level["deltas"]["ttft_p50_ms"]
    assert p50["judgement"] == "cache_flatters"
    expected_ms = PREFIX / PREFILL_RATE * 1000
    assert 0.75 * expected_ms <= p50["distinct"] - p50["cache"] <= 1.25 * expected_ms, p50
    assert level["distinct"]["prompt_tokens_mean"] == level["cache"]["prompt_tokens_mean"] == 2054
    assert level["distinct"]["prefix_cache_hit_rate"] <= 0.02
    assert 0.6 <= level["cache"]["prefix_cache_hit_rate"] <= 0.76
    # the probe's answer ends the run's plain answer, the terminal's last lines
    assert "overstate capacity" in probe["answer"] and f"Prefix cache: {probe['answer']}" in summary["answer"]
    assert f"[capacity] answer: {summary['answer']}" in out
    assert probe["server_prefix_caching"] is True
    # Capacity counts the distinct arm only.
    assert [r["valid"] for r in summary["steps"]] == [True, False]
    assert 1 in summary["capacity"]["excluded_steps"]


@pytest.mark.measured
@pytest.mark.slow
def test_without_a_prefix_cache_repeats_show_no_effect(tmp_path):
    # The same probe on exact repeats, open loop, with the simulator's cache explicitly off: the
    # arms are the same work, so the analysis must find no effect — and say the server caches nothing.
    folder, summary, _ = run_probe(tmp_path, "probe-off", {**PROBE_SIM, "prefix_cache": False},
                                   {"arm": "repeat", "pool_size": 3, "loop": "open", "levels": [3]})
    assert [(s["arm"], s["kind"], s["target_rps"]) for s in read_steps(folder)] == \
        [("distinct", "rate", 3), ("repeat", "rate", 3)]
    assert {r["prompt_id"] for r in map(json.loads, (folder / "requests.jsonl").read_text().splitlines())
            if r["step"] == 1} <= {f"s{i}#repeat" for i in range(1000)}
    probe = summary["cache_probe"]
    assert probe["status"] == "no_effect", probe
    # A server with caching off queries no cache: its hit rate is unknown, and it says it is off.
    assert probe["levels"][0]["cache"]["prefix_cache_hit_rate"] is None and probe["server_prefix_caching"] is False
    assert probe["answer"].startswith("No cache effect beyond noise") and "reports prefix caching off" in probe["answer"]
