"""LogHistogram accuracy against exact nearest-rank quantiles, and LLMStats worker→master merging."""

from __future__ import annotations

import csv
import json
import math
import random
from typing import Any

import msgpack
import pytest

from capacity_plugins.contracts.percentiles import nearest_rank
from capacity_plugins.sinks.stats import METRICS, LLMStats, LogHistogram

QS = [i / 200 for i in range(201)] + [0.001, 0.999, 0.9999]


def _worst_rel_error(values: list[float], h: LogHistogram) -> float:
    s = sorted(values)
    worst = 0.0
    for q in QS:
        exact = nearest_rank(s, q)
        got = h.quantile(q)
        assert got is not None
        if exact == 0:
            assert got == 0
            continue
        worst = max(worst, abs(got - exact) / exact)
    return worst


def _dist(name: str, rng: random.Random, n: int) -> list[float]:
    if name == "lognormal":
        return [rng.lognormvariate(4.0, 1.2) for _ in range(n)]
    if name == "bimodal":  # prefix-cache hits (fast) vs misses (slow)
        return [rng.gauss(30, 3) if rng.random() < 0.7 else rng.gauss(900, 80) for _ in range(n)]
    if name == "constant":
        return [123.456] * n
    if name == "tiny":  # loopback ITL gaps in ms
        return [rng.uniform(0.002, 0.08) for _ in range(n)]
    if name == "wide":  # 10 µs … 10 min
        return [10 ** rng.uniform(-2, 5.8) for _ in range(n)]
    if name == "integers":
        return [float(rng.randint(1, 50)) for _ in range(n)]
    raise AssertionError(name)


@pytest.mark.parametrize("dist", ["lognormal", "bimodal", "constant", "tiny", "wide", "integers"])
def test_quantiles_within_one_percent_of_exact_nearest_rank(dist: str) -> None:
    rng = random.Random(hash(dist) & 0xFFFF)
    values = _dist(dist, rng, 20_000)
    h = LogHistogram()
    h.add_many(values)
    assert h.count == len(values)
    assert _worst_rel_error(values, h) <= 0.01
    assert h.min == min(values) and h.max == max(values)
    assert h.mean == pytest.approx(sum(values) / len(values), rel=1e-9)


def test_add_and_add_many_agree_and_small_counts_are_exact() -> None:
    values = [5.0, 1.0, 3.0]
    a, b = LogHistogram(), LogHistogram()
    for v in values:
        a.add(v)
    b.add_many(values)
    assert a.to_dict() == b.to_dict()
    # With three values the nearest-rank quantiles are min, the middle one, max.
    assert a.quantile(0.0) == 1.0 and a.quantile(0.33) == 1.0
    assert a.quantile(0.5) == pytest.approx(3.0, rel=0.005)
    assert a.quantile(0.67) == 5.0 and a.quantile(1.0) == 5.0
    one = LogHistogram()
    one.add(42.0)
    assert one.quantile(0.5) == 42.0
    assert LogHistogram().quantile(0.5) is None and LogHistogram().mean is None


def test_add_many_counts_same_read_zeros_like_add() -> None:
    # A backlog read gives mostly 0.0 gaps, which add_many counts in one call: the sketch must end
    # as add() one value at a time leaves it (count, zeros, sum, min, max, buckets), lists or not.
    rng = random.Random(3)
    batches = [[0.0] * 200 + [12.5, 0.0, 3e-4, -0.0, -1.5, float("nan"), 0.0],
               [0.0, 0.0, 0.0],
               [rng.choice([0.0, 0.0, 0.0, rng.uniform(0.01, 50)]) for _ in range(500)]]
    for values in batches:
        a, b, c = LogHistogram(), LogHistogram(), LogHistogram()
        for v in values:
            a.add(v)
        b.add_many(values)
        c.add_many(iter(values))  # not a list: the plain loop
        assert a.to_dict() == b.to_dict() == c.to_dict()
        assert (a.count, a.zero_count, a.sum, a.min, a.max) == (b.count, b.zero_count, b.sum, b.min, b.max)


def test_count_argument_weights_values() -> None:
    h = LogHistogram()
    h.add(10.0, count=9)
    h.add(1000.0)
    assert h.count == 10 and h.quantile(0.9) == pytest.approx(10.0, rel=0.005)
    assert h.quantile(0.91) == 1000.0


def test_zero_sub_resolution_negative_and_nan() -> None:
    h = LogHistogram(min_value=1e-3)
    h.add_many([0.0, 1e-5, -2.0, float("nan"), 5.0])
    h.add(float("nan"))
    assert h.count == 4 and h.zero_count == 3
    assert h.min == 0.0 and h.quantile(0.5) == 0.0 and h.quantile(0.75) == 0.0
    assert h.quantile(1.0) == 5.0
    assert list(h.iter_buckets())[0] == (1e-3, 3)


def test_merge_of_shards_equals_single_histogram() -> None:
    rng = random.Random(7)
    values = _dist("lognormal", rng, 9000) + _dist("tiny", rng, 1000)
    rng.shuffle(values)
    whole = LogHistogram()
    whole.add_many(values)
    shards = [LogHistogram() for _ in range(3)]
    for i, v in enumerate(values):
        shards[i % 3].add(v)
    merged = LogHistogram()
    for s in shards:
        merged.merge(s)
    d1, d2 = whole.to_dict(), merged.to_dict()
    assert d1.pop("s") == pytest.approx(d2.pop("s"), rel=1e-12)  # float sum order differs
    assert d1 == d2
    for q in QS:
        assert merged.quantile(q) == whole.quantile(q)


def test_merge_refuses_different_resolution() -> None:
    with pytest.raises(ValueError, match="different resolution"):
        LogHistogram(0.005).merge(LogHistogram(0.01))
    with pytest.raises(ValueError):
        LogHistogram(rel_error=0.0)


def test_dict_round_trip_through_msgpack_and_json() -> None:
    rng = random.Random(3)
    h = LogHistogram()
    h.add_many(_dist("wide", rng, 5000) + [0.0])
    for codec in (lambda d: msgpack.unpackb(msgpack.packb(d)), lambda d: json.loads(json.dumps(d))):
        back = LogHistogram.from_dict(codec(h.to_dict()))
        assert back.to_dict() == h.to_dict()
        assert [back.quantile(q) for q in QS] == [h.quantile(q) for q in QS]
    empty = LogHistogram.from_dict(json.loads(json.dumps(LogHistogram().to_dict())))
    assert empty.count == 0 and empty.min is None


def test_iter_buckets_and_cumulative_counts_match_exact_counts() -> None:
    rng = random.Random(11)
    values = _dist("lognormal", rng, 5000)
    h = LogHistogram()
    h.add_many(values)
    buckets = list(h.iter_buckets())
    bounds = [b for b, _ in buckets]
    assert bounds == sorted(bounds) and sum(c for _, c in buckets) == len(values)
    for bound in bounds[:: max(1, len(bounds) // 40)]:
        assert h.cumulative_at(bound) == sum(1 for v in values if v <= bound)
    assert h.cumulative_at(0.0) == 0 and h.cumulative_at(max(values) * 2) == len(values)
    # A bound between bucket edges is off by at most the one straddling bucket.
    mid = nearest_rank(sorted(values), 0.5)
    exact = sum(1 for v in values if v <= mid)
    assert exact - h.cumulative_at(mid) <= max(c for _, c in buckets)


# -- LLMStats --------------------------------------------------------------------------------


def _fake_request(rng: random.Random, t: float) -> dict:
    ok = rng.random() > 0.1
    n_out = rng.randint(1, 40)
    ttft = rng.lognormvariate(4, 0.8)
    itl = [rng.lognormvariate(2.3, 0.3) for _ in range(n_out - 1)]
    e2e = ttft + sum(itl)
    return dict(
        ok=ok,
        error_kind=None if ok else rng.choice(["http_429", "timeout", "stream_cut"]),
        ttft_ms=ttft if ok else None,
        itl_ms=itl if ok else [],
        tpot_ms=(sum(itl) / (n_out - 1)) if ok and n_out > 1 else None,
        e2e_ms=e2e,
        output_tokens=n_out,
        prompt_tokens=rng.randint(10, 500),
        now_unix=t,
    )


def test_take_delta_merge_delta_through_msgpack_equals_direct_recording() -> None:
    rng = random.Random(5)
    direct = LLMStats()
    master = LLMStats()
    workers = [LLMStats(), LLMStats()]
    truth: dict[str, list[float]] = {m: [] for m in METRICS}
    t = 1_700_000_000.0
    for i in range(3000):
        t += 0.01
        name = "chat" if i % 3 else "completions"
        req = _fake_request(rng, t)
        direct.record(name, **req)
        workers[i % 2].record(name, **req)
        if req["ok"]:
            for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
                if req[m] is not None:
                    truth[m].append(req[m])
            truth["itl_ms"].extend(req["itl_ms"])
        if i % 250 == 0:  # report_to_master every so often, as msgpack on the wire
            for w in workers:
                master.merge_delta(msgpack.unpackb(msgpack.packb(w.take_delta())))
    for w in workers:
        master.merge_delta(msgpack.unpackb(msgpack.packb(w.take_delta())))
        assert w.take_delta()["names"] == {}  # nothing left after a take
    for now in (t, None):
        for got, want in zip(master.rows(now), direct.rows(now), strict=True):
            assert got.keys() == want.keys()
            for key, value in want.items():
                if key.endswith("mean_ms") or key in ("rps", "output_tokens_per_s"):
                    assert got[key] == pytest.approx(value, rel=1e-9)  # float sums, other order
                else:
                    assert got[key] == value, key
    agg = master.rows()[-1]
    assert agg["name"] == "Aggregated" and agg["requests"] == 3000
    assert agg["failures"] == sum(agg["errors_by_kind"].values()) > 0
    for metric, values in truth.items():
        s = sorted(values)
        base = metric[:-3]
        assert agg[f"{base}_count"] == len(values)
        for label, q in LLMStats.PERCENTILES:
            exact = nearest_rank(s, q)
            assert abs(agg[f"{base}_{label}_ms"] - exact) / exact <= 0.01, (metric, label)


def test_failures_are_counted_but_not_in_latency_histograms() -> None:
    s = LLMStats()
    s.record("chat", ok=False, error_kind="http_429", ttft_ms=None, itl_ms=[], tpot_ms=None,
             e2e_ms=2.0, output_tokens=0, prompt_tokens=None, now_unix=100.0)
    s.record("chat", ok=False, error_kind=None, ttft_ms=1.0, itl_ms=[1.0], tpot_ms=None,
             e2e_ms=2.0, output_tokens=3, prompt_tokens=None, now_unix=100.5)
    s.record("chat", ok=True, error_kind=None, ttft_ms=50.0, itl_ms=[10.0, 12.0], tpot_ms=11.0,
             e2e_ms=72.0, output_tokens=3, prompt_tokens=20, now_unix=101.0)
    row = s.rows()[0]
    assert row["requests"] == 3 and row["failures"] == 2
    assert row["errors_by_kind"] == {"http_429": 1, "unknown": 1}
    assert row["ttft_count"] == 1 and row["ttft_p50_ms"] == 50.0 and row["e2e_p99_ms"] == 72.0
    assert row["itl_count"] == 2 and row["output_tokens"] == 3 and row["prompt_tokens"] == 20


def test_recent_window_rates() -> None:
    s = LLMStats(window_s=10)
    base = 1_000_000.0
    for sec in range(30):  # 2 requests / s, 10 output tokens each, for 30 s
        for k in range(2):
            s.record("chat", ok=True, error_kind=None, ttft_ms=5.0, itl_ms=[], tpot_ms=None,
                     e2e_ms=100.0, output_tokens=10, prompt_tokens=1, now_unix=base + sec + 0.25 + 0.5 * k)
    row = s.rows(now_unix=base + 30.2)[0]
    assert row["rate_window_s"] == 10
    assert row["rps"] == pytest.approx(2.0) and row["output_tokens_per_s"] == pytest.approx(20.0)
    # Whole run: 60 requests from the first send (base + 0.25 - 0.1) to the last end (base + 29.75).
    overall = s.rows()[0]
    assert overall["rps"] == pytest.approx(60 / 29.6)
    # Nothing finished in the last 10 s → 0, not a stale rate.
    assert s.rows(now_unix=base + 100)[0]["rps"] == 0.0


def test_reset_forgets_totals_and_pending() -> None:
    s = LLMStats()
    rng = random.Random(1)
    for i in range(20):
        s.record("chat", **_fake_request(rng, 10.0 + i))
        if i == 10:
            s.take_delta()
    s.reset()
    assert s.rows() == [s.rows()[0]] and s.rows()[0]["requests"] == 0
    assert s.take_delta()["names"] == {}
    assert s.histograms("chat")["ttft_ms"].count == 0


def test_write_csv_has_a_row_per_name_and_metric(tmp_path) -> None:
    s = LLMStats()
    rng = random.Random(2)
    for i in range(200):
        s.record("chat" if i % 2 else "summarize", **_fake_request(rng, 50.0 + i / 10))
    out = s.write_csv(tmp_path / "llm_stats.csv")
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["name"], r["metric"]) for r in rows] == [
        (n, m[:-3]) for n in ("chat", "summarize", "Aggregated") for m in METRICS
    ]
    assert set(LLMStats.CSV_COLUMNS) == set(rows[0])
    live = {r["name"]: r for r in s.rows()}
    for r in rows:
        expected = live[r["name"]][f"{r['metric']}_p95_ms"]
        assert float(r["p95_ms"]) == pytest.approx(expected, rel=1e-5)
        assert int(r["requests"]) == live[r["name"]]["requests"]
    assert not (tmp_path / "llm_stats.csv.tmp").exists()


def test_histograms_access_for_exporters() -> None:
    s = LLMStats()
    s.record("chat", ok=True, error_kind=None, ttft_ms=30.0, itl_ms=[1.0, 2.0], tpot_ms=1.5,
             e2e_ms=33.0, output_tokens=3, prompt_tokens=4, now_unix=1.0)
    s.record("other", ok=True, error_kind=None, ttft_ms=60.0, itl_ms=[], tpot_ms=None,
             e2e_ms=61.0, output_tokens=1, prompt_tokens=4, now_unix=2.0)
    assert s.names() == ["chat", "other"]
    h = s.histograms("chat")
    assert set(h) == set(METRICS) and h["itl_ms"].count == 2
    agg = s.histograms(LLMStats.AGGREGATED)
    assert agg["ttft_ms"].count == 2 and agg["ttft_ms"].max == 60.0
    assert s.histograms("missing")["e2e_ms"].count == 0
    assert math.isclose(sum(c for _, c in agg["e2e_ms"].iter_buckets()), 2)


def test_views_between_takes_neither_lose_nor_double_count() -> None:
    w, master = LLMStats(), LLMStats()
    kw: dict[str, Any] = dict(ok=True, error_kind=None, ttft_ms=10.0, itl_ms=[1.0], tpot_ms=1.0, e2e_ms=12.0,
              output_tokens=2, prompt_tokens=3)
    w.record("chat", now_unix=1.0, **kw)
    assert w.rows()[0]["requests"] == 1  # a local view flushes pending records
    w.record("chat", now_unix=2.0, **kw)
    w.histograms("chat")
    master.merge_delta(w.take_delta())
    w.record("chat", now_unix=3.0, **kw)
    master.merge_delta(w.take_delta())
    assert w.take_delta()["names"] == {}
    assert master.rows()[0]["requests"] == w.rows()[0]["requests"] == 3
    assert master.rows()[0]["ttft_count"] == 3 and master.rows()[0]["output_tokens"] == 6
