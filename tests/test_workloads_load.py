"""Workload classes on the load side: the seeded weighted draw, each class's prompts and settings,
and what travels to the workers in the setup message (no Locust process needed)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.slo import judge_mix
from capacity_plugins.corpus import load_corpus
from capacity_plugins.dialects import RequestParams
from capacity_plugins.errors import UserError
from capacity_plugins.rehearsal.steps import Step, StepAccounting, StepTimeline
from capacity_plugins.rehearsal.workloads import (
    ClassCorpora,
    WorkloadSpec,
    build_mix,
    specs_from_scenario,
    with_hashes,
)
from capacity_plugins.scenario import load_scenario
from capacity_plugins.swarm.messages import Setup

SHORT = "synthetic:prompt_tokens=16,n=400,seed=1"
LONG = "synthetic:prompt_tokens=600,n=300,seed=2"
OPTIONS = LLMOptions(corpus=SHORT, min_distinct=100, seed=5, max_tokens=64, temperature=0.7)
PARAMS = RequestParams(max_tokens=64, temperature=0.7)
SPECS = [
    WorkloadSpec("chat", 6.0),
    WorkloadSpec("rag", 3.0, corpus={"path": LONG}),
    WorkloadSpec("batch", 1.0, request={"max_tokens": 512, "stream": False}),
]


def mix(shard_index: int = 0, shard_count: int = 1, specs: list[WorkloadSpec] = SPECS):
    run_corpus = load_corpus(SHORT, min_distinct=100)
    return build_mix(specs, OPTIONS, PARAMS, ClassCorpora(), run_corpus, shard_index=shard_index, shard_count=shard_count)


def test_classes_are_drawn_by_weight():
    m = mix()
    counts = collections.Counter(m.draw(step).name for step in range(4) for _ in range(3000))
    assert counts["chat"] / 12000 == pytest.approx(0.6, abs=0.02)
    assert counts["rag"] / 12000 == pytest.approx(0.3, abs=0.02)
    assert counts["batch"] / 12000 == pytest.approx(0.1, abs=0.02)


def test_the_draw_is_seeded_per_step_and_worker():
    a, b = mix(), mix()
    for _ in range(37):  # a different number of requests in step 0 ...
        a.draw(0)
    # ... leaves step 1's sequence as it was: reruns offer the same mix in every step
    assert [a.draw(1).name for _ in range(50)] == [b.draw(1).name for _ in range(50)]

    def seq(m):
        return [m.draw(1).name for _ in range(40)]

    assert seq(mix(1, 2)) == seq(mix(1, 2))  # a worker's stream is reproducible ...
    assert seq(mix(0, 2)) != seq(mix(1, 2))  # ... and its own, not its neighbour's in lockstep


def test_each_class_sends_its_own_prompts_and_settings():
    m = mix()
    lanes = {lane.name: lane for lane in m.lanes}
    assert lanes["batch"].params == RequestParams(max_tokens=512, temperature=0.7, stream=False)
    assert lanes["chat"].params == PARAMS and lanes["rag"].params == PARAMS
    assert lanes["rag"].sampler.next().prompt_tokens_est >= 500
    assert lanes["chat"].sampler.next().prompt_tokens_est <= 20
    assert lanes["rag"].request_name == "openai-chat:rag"
    # chat and batch read the same corpus: one sampler, so neither repeats the other's prompts
    assert lanes["chat"].sampler is lanes["batch"].sampler
    drawn = [m.next(0) for _ in range(300)]
    short_ids = [sample.id for sample, lane in drawn if lane.name != "rag"]
    assert len(short_ids) > 200 and len(short_ids) == len(set(short_ids))


def test_a_worker_refuses_a_class_corpus_that_differs_from_the_masters():
    run_corpus = load_corpus(SHORT, min_distinct=100)
    hashed = with_hashes(SPECS, ClassCorpora(), OPTIONS, run_corpus)
    assert hashed[1].sha256 == load_corpus(LONG, min_distinct=1).sha256
    build_mix(hashed, OPTIONS, PARAMS, ClassCorpora(), run_corpus, shard_index=0, shard_count=1)
    wrong = [hashed[0], WorkloadSpec("rag", 3.0, corpus={"path": LONG}, sha256="0" * 64)]
    with pytest.raises(UserError, match="workload rag: corpus .* master's"):
        build_mix(wrong, OPTIONS, PARAMS, ClassCorpora(), run_corpus, shard_index=0, shard_count=1)


def test_the_setup_message_carries_the_classes():
    setup = Setup(options=OPTIONS, sha256="x", shard_count=2, workloads=[s.to_message() for s in SPECS])
    back = Setup.from_data(setup.to_data())
    assert [WorkloadSpec.from_message(w) for w in back.workloads] == SPECS
    assert Setup.from_data({"options": {}, "sha256": "x", "shard_count": 1}).workloads == []  # an older master


def test_specs_carry_only_what_a_class_set(tmp_path: Path):
    (tmp_path / "long.jsonl").write_text("".join(f'{{"prompt": "long prompt {i}"}}\n' for i in range(20)))
    p = tmp_path / "s.yaml"
    p.write_text("target: {url: embedded}\nrequest: {max_tokens: 32}\nworkloads:\n"
                 "  - {name: chat, weight: 2}\n"
                 "  - {name: rag, corpus: {path: long.jsonl, min_distinct: 10}, request: {max_tokens: 8}}\n")
    chat, rag = specs_from_scenario(load_scenario(p))
    assert chat == WorkloadSpec("chat", 2.0)  # everything else: the run's options, flags included
    assert rag.corpus == {"path": str((tmp_path / "long.jsonl").resolve()), "min_distinct": 10}
    assert rag.request == {"max_tokens": 8}


# -- a live capacity search judges the step as the mix -------------------------------------------------

def _class_rec(workload, sent, ttft_ms, e2e_ms, ok=True):
    # an answer without reasoning: its first token is its first visible one
    return {"step": 0, "sent_unix": sent, "ok": ok, "ttft_ms": ttft_ms, "first_visible_ms": ttft_ms, "e2e_ms": e2e_ms,
            "tpot_ms": 10.0, "workload": workload, "error_kind": None if ok else "http_5xx"}


def test_the_search_keeps_each_class_sample_apart():
    tl = StepTimeline()
    tl.upsert(Step(0, "concurrency", 4.0, 100.0, 102.0, 112.0))
    acc = StepAccounting(tl, keep_slo_views=True)
    acc.add_record(_class_rec("chat", 103.0, 100.0, 500.0))
    acc.add_record(_class_rec("chat", 104.0, 900.0, 1500.0, ok=False))
    acc.add_record(_class_rec("rag", 105.0, 2500.0, 4000.0))
    acc.add_record(_class_rec("rag", 101.0, 9999.0, 9999.0))  # warm-up: not measured
    got = acc.class_samples(0)
    assert got["chat"][1:] == (2, 1) and got["chat"][0]["ttft_ms"] == [100.0]
    assert got["rag"] == ({"ttft_ms": [2500.0], "e2e_ms": [4000.0], "tpot_ms": [10.0], "first_visible_ms": [2500.0],
                           "tpot_visible_ms": [10.0]}, 1, 0)
    assert acc.slo_sample(0)[1:] == (3, 1)  # the step as a whole, as before


def _sample(n, value, slo, errors=0):
    return ({"ttft_ms": [value] * n, "tpot_ms": [0.0] * n, "e2e_ms": [value] * n}, n + errors, errors, slo)


def test_judge_mix_fails_on_any_class_and_passes_only_when_every_class_shows_it():
    chat = SLOConfig(ttft_p95_ms=1000, tpot_p95_ms=None)
    batch = SLOConfig(ttft_p95_ms=None, tpot_p95_ms=None, e2e_p95_ms=30000)
    ok = {"chat": _sample(100, 200.0, chat), "batch": _sample(100, 9000.0, batch)}
    assert judge_mix(ok, min_requests=50, confidence=0.95) == ("pass", None)
    # batch's 9 s TTFT would fail a top-level 1 s limit; chat's TTFT over its own limit fails the mix
    slow = {**ok, "chat": _sample(100, 2000.0, chat)}
    assert judge_mix(slow, min_requests=50, confidence=0.95) == ("fail", "chat.ttft_p95_ms")
    thin = {**ok, "batch": _sample(20, 9000.0, batch)}
    judged, why = judge_mix(thin, min_requests=50, confidence=0.95)
    assert judged == "uncertain" and why.startswith("batch")
    absent = {**ok, "batch": ({}, 0, 0, batch)}
    assert judge_mix(absent, min_requests=50, confidence=0.95) == ("uncertain", "batch: no measured request")


def test_a_step_runs_on_for_its_thinnest_class():
    # a sweep keeps no SLO views, but counts each class: the window extends until the rarest has min_requests
    tl = StepTimeline()
    tl.upsert(Step(0, "concurrency", 4.0, 100.0, 102.0, 112.0))
    acc = StepAccounting(tl)
    for i in range(9):
        acc.add_record(_class_rec("chat", 103.0 + i * 0.1, 100.0, 500.0))
    acc.add_record(_class_rec("rag", 104.0, 2500.0, 4000.0, ok=False))
    assert acc.thinnest_class(0, ["chat", "rag"]) == ("rag", 1)
    assert acc.thinnest_class(0, ["chat", "rag", "batch"]) == ("batch", 0)  # none drawn yet
    assert acc.class_samples(0)["rag"] == ({}, 1, 1) and acc.measured(0) == 10
