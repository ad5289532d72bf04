"""The cache arm of a prefix-cache probe, built from a corpus: what it shares, what it keeps its
own, its exemption from min_distinct, and what the simulator's prefix cache makes of it."""

from __future__ import annotations

import pytest

from capacity_plugins.corpus import load_corpus
from capacity_plugins.corpus.cache_arms import (
    MIN_TAIL_TOKENS,
    PROBE_TAG,
    ArmSpec,
    RepeatArm,
    SharedPrefixArm,
    build_arm,
    describe,
)
from capacity_plugins.corpus.collection import Corpus
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.text import token_units
from capacity_plugins.errors import UserError

LONG = "synthetic:prompt_tokens=400,output_tokens=8,n=1000,seed=3"


@pytest.fixture(scope="module")
def long_corpus() -> Corpus:
    return load_corpus(LONG, min_distinct=1000)


def test_token_units_join_back_and_count_as_the_estimate():
    for text in ("plain english text, nothing else", "混合 text 和中文", "", "a\n\nb"):
        units = token_units(text)
        assert "".join(units) == text
    assert len(token_units("abcdefghij")) == 3 and len(token_units("你好")) == 2


def test_shared_prefix_arm_shares_exactly_the_prefix_and_keeps_every_length(long_corpus):
    arm = build_arm(long_corpus, ArmSpec("shared_prefix", prefix_tokens=300, seed=7))
    assert isinstance(arm, SharedPrefixArm)
    prompts = [arm.next() for _ in range(50)]
    units = [token_units(p.text) for p in prompts]
    head = units[0][:300]
    assert "".join(head).startswith(PROBE_TAG)
    for u in units:
        assert u[:300] == head  # the whole prefix, identical in every prompt of the arm
        assert len(u) == 400  # the corpus prompt's own length: the arm adds no prefill work
    assert len({"".join(u[300:]) for u in units}) == 50  # ... and every tail its own
    # The tails are the corpus prompts' own tails, in the distinct arm's order (same seed, shard).
    distinct = long_corpus.sampler("shuffle", 7, 0, 1)
    for u in units[:5]:
        assert "".join(u[300:]) == "".join(token_units(distinct.next().text)[300:])
    # No corpus prompt begins like the prefix: the distinct arm never hits the blocks it leaves cached.
    assert not any(s.text.startswith(PROBE_TAG[:20]) for s in long_corpus.samples)


def test_short_prompts_keep_a_tail_of_their_own():
    corpus = Corpus([Sample.make(f"s{i}", prompt=f"{i:04d} " * n) for i, n in enumerate((3, 10, 40, 200))],
                    "mem", "x")
    arm = SharedPrefixArm(corpus, ArmSpec("shared_prefix", prefix_tokens=100))
    by_id = {}
    for _ in range(4):
        s = arm.next()
        by_id[s.id] = token_units(s.text)
    prefix = arm.prefix
    for sample in corpus.samples:
        original = token_units(sample.text)
        got = by_id[f"{sample.id}+prefix"]
        shared = max(0, min(100, len(original) - MIN_TAIL_TOKENS))
        assert len(got) == len(original)
        assert got[:shared] == prefix[:shared] and got[shared:] == original[shared:]
    info = describe(corpus, ArmSpec("shared_prefix", prefix_tokens=100))
    lengths = [len(token_units(s.text)) for s in corpus.samples]
    assert info["full_prefix_share"] == 0.25 and info["prompt_tokens_mean"] == pytest.approx(sum(lengths) / 4)


def test_repeat_arm_cycles_a_small_pool_the_same_on_every_process(long_corpus):
    spec = ArmSpec("repeat", pool_size=4, seed=1)
    a, b = RepeatArm(long_corpus, spec, 0, 2), RepeatArm(long_corpus, spec, 1, 2)
    first = [a.next().text for _ in range(12)]
    assert len(set(first)) == 4 and first[:4] == first[4:8] == first[8:]  # exact repeats, in turn
    assert {s.text for s in a.pool} == {s.text for s in b.pool}  # one pool for the swarm
    assert b.next().text != a.pool[0].text  # ... each process starting at a different prompt
    assert all(s.text.startswith(PROBE_TAG) for s in a.pool)


def test_the_cache_arm_is_exempt_from_min_distinct(long_corpus):
    # The corpus itself must pass the rule (the distinct arm counts) ...
    with pytest.raises(UserError, match="fewer than the required 2000"):
        load_corpus(LONG, min_distinct=2000)
    # ... while the arm built from it repeats on purpose: 4 distinct prompts in 100 sends, no error.
    arm = build_arm(long_corpus, ArmSpec("repeat", pool_size=4))
    assert len({arm.next().text for _ in range(100)}) == 4
    with pytest.raises(UserError, match="empty"):
        build_arm(Corpus([], "none", "x"), ArmSpec("repeat"))
    with pytest.raises(UserError, match="unknown"):
        ArmSpec("warm")  # type: ignore[arg-type]


def test_spec_travels_as_a_message():
    spec = ArmSpec("shared_prefix", prefix_tokens=512, seed=9)
    assert ArmSpec.from_message(spec.to_message()) == spec


def test_simulator_caches_exactly_the_shared_prefix(start_simulator, tmp_path, long_corpus):
    # Through the chat template (3 template units first), a 320-token prefix fills (3 + 320) // 16
    # = 20 whole blocks: each shared-arm request after the first finds 320 tokens cached; an exact
    # repeat finds all but its last block; distinct corpus prompts find nothing.
    from capacity_plugins.simulator.rawclient import Connection
    from capacity_plugins.simulator.truth import read_truth
    from capacity_plugins.telemetry.maps import SeriesTracker, normalize
    from capacity_plugins.telemetry.scrape import ScrapeTarget

    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, prefix_cache=True)
    target, tracker = ScrapeTarget(f"http://127.0.0.1:{sim.port}/metrics", "simulator"), SeriesTracker()

    def hit_rate(unix: float) -> float | None:
        rows = tracker.rows(normalize("simulator", target.scrape(timeout_s=5).samples, "sim"), unix)
        return next((r["value"] for r in rows if r["series"] == "prefix_cache_hit_rate"), None)

    assert hit_rate(1.0) is None  # a ratio needs two scrapes
    shared = build_arm(long_corpus, ArmSpec("shared_prefix", prefix_tokens=320))
    repeat = build_arm(long_corpus, ArmSpec("repeat", pool_size=2))
    distinct = long_corpus.sampler("shuffle", 42, 0, 1)
    sent = [distinct.next() for _ in range(3)] + [shared.next() for _ in range(3)] + [repeat.next() for _ in range(4)]
    with Connection(sim.port) as conn:
        for s in sent:
            body = {"model": "sim-model", "messages": s.as_messages(), "max_tokens": 1}
            assert conn.request("POST", "/v1/chat/completions", body).status == 200
    rows = read_truth(truth, len(sent))
    cached = [r["cached_tokens"] for r in rows]
    assert cached[:3] == [0, 0, 0]
    assert cached[3:6] == [0, 320, 320]
    full = [(r["prompt_tokens"] - 1) // 16 * 16 for r in rows[6:]]
    assert cached[6:] == [0, 0, full[2], full[3]]
    # The series the telemetry map makes of the simulator's vLLM counters: cached / queried tokens.
    assert hit_rate(2.0) == pytest.approx(sum(cached) / sum(r["prompt_tokens"] for r in rows))
