"""The live exporter: real LLMStats (and a hand-made stats object shaped like its contract), runner info
and telemetry, served over HTTP on loopback and parsed back with prometheus_client's parser."""

import time
import urllib.request

import pytest
from helpers.ports import free_port
from helpers.prometheus import parse

from capacity_plugins.sinks.stats import LLMStats
from capacity_plugins.webui.exporter import BUCKETS_S, build_registry, flask_view, rebucket, serve


def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        return parse(resp.read().decode())


def _stats() -> LLMStats:
    stats = LLMStats()
    now = time.time()
    for ttft, ok, kind in ((3.0, True, None), (40.0, True, None), (200.0, True, None), (1500.0, True, None),
                           (None, False, "http_429"), (None, False, "timeout"), (None, False, "timeout")):
        stats.record("chat", ok=ok, error_kind=kind, ttft_ms=ttft, itl_ms=[12.0, 30.0] if ok else [],
                     tpot_ms=21.0 if ok else None, e2e_ms=(ttft or 0) + 100.0 if ok else 5.0,
                     output_tokens=3 if ok else 0, prompt_tokens=50, now_unix=now)
    stats.record("completions", ok=True, error_kind=None, ttft_ms=80.0, itl_ms=[], tpot_ms=None, e2e_ms=90.0,
                 output_tokens=1, prompt_tokens=10, now_unix=now)
    return stats


def test_histograms_counters_runner_and_telemetry_over_http():
    stats = _stats()
    info = {"users": 16, "step": 2, "level": 16, "offered_rps": None, "achieved_rps": 7.5, "state": "running",
            "workers": 2, "target_rps": float("nan")}
    latest = {"gpu-node-1": {"0": {"gpu_util_pct": {"value": 87.0, "unit": "%", "unix": 1.0}}},
              "127.0.0.1:8000": {"m": {"kv_cache_usage": {"value": 0.6, "unit": "ratio", "unix": 1.0}}}}
    registry = build_registry(llm_stats=lambda: stats, runner_info=lambda: info, telemetry_latest=lambda: latest)
    server = serve(registry, "127.0.0.1", free_port())
    try:
        m = _scrape(server.port)
        stats.record("chat", ok=True, error_kind=None, ttft_ms=4.0, itl_ms=[], tpot_ms=None, e2e_ms=9.0,
                     output_tokens=1, prompt_tokens=1, now_unix=time.time())
        m2 = _scrape(server.port)                                      # read live at scrape time
    finally:
        server.stop()

    def b(le, name="chat", metric="capacity_ttft_seconds_bucket"):
        return m[(metric, (("le", le), ("name", name)))]

    assert b("0.005") == 1 and b("0.05") == 2 and b("0.3") == 3 and b("2.0") == 4 and b("+Inf") == 4
    assert b("0.001") == 0
    assert m[("capacity_ttft_seconds_count", (("name", "chat"),))] == 4
    assert m[("capacity_ttft_seconds_sum", (("name", "chat"),))] == pytest.approx(1.743, rel=0.01)
    assert b("0.025", metric="capacity_itl_seconds_bucket") == 4 and b("0.05", metric="capacity_itl_seconds_bucket") == 8
    assert b("+Inf", name="completions") == 1
    assert m2[("capacity_ttft_seconds_count", (("name", "chat"),))] == 5
    assert m[("capacity_requests_total", (("error_kind", ""), ("name", "chat"), ("status", "ok")))] == 4
    assert m[("capacity_requests_total", (("error_kind", "timeout"), ("name", "chat"), ("status", "error")))] == 2
    assert m[("capacity_requests_total", (("error_kind", "http_429"), ("name", "chat"), ("status", "error")))] == 1
    assert m[("capacity_output_tokens_total", (("name", "chat"),))] == 12
    assert not any(dict(labels).get("name") == "Aggregated" for _, labels in m)
    assert m[("capacity_users", ())] == 16 and m[("capacity_step_index", ())] == 2
    assert m[("capacity_achieved_rps", ())] == 7.5 and m[("capacity_workers", ())] == 2
    assert ("capacity_offered_rps", ()) not in m and ("capacity_target_rps", ()) not in m   # None / NaN
    assert m[("capacity_runner_state", (("state", "running"),))] == 1
    assert m[("capacity_telemetry_gpu_util_pct", (("device", "0"), ("host", "gpu-node-1")))] == 87.0
    assert m[("capacity_telemetry_kv_cache_usage", (("device", "m"), ("host", "127.0.0.1:8000")))] == 0.6


class _Hist:
    """Shaped like the LogHistogram contract: iter_buckets() (upper_ms, count) sorted, .count, .sum (ms)."""

    def __init__(self, buckets):
        self._b = buckets
        self.count = sum(c for _, c in buckets)
        self.sum = sum(u * c for u, c in buckets)

    def iter_buckets(self):
        return iter(self._b)


class _FakeStats:
    AGGREGATED = "Aggregated"

    def names(self):
        return ["x"]

    def histograms(self, name):
        return {"ttft_ms": _Hist([(1.0, 1), (100.0, 2), (99999.0, 1)]), "itl_ms": _Hist([]),
                "tpot_ms": _Hist([]), "e2e_ms": _Hist([(7000.0, 3)])}

    def rows(self, now_unix=None):
        return [{"name": "x", "requests": 5, "failures": 1, "errors_by_kind": {"connect": 1},
                 "output_tokens": 9, "prompt_tokens": 3, "rps": 0.5, "output_tokens_per_s": None},
                {"name": "Aggregated", "requests": 5, "failures": 1, "errors_by_kind": {"connect": 1},
                 "output_tokens": 9, "prompt_tokens": 3, "rps": 0.5, "output_tokens_per_s": None}]


def test_contract_shaped_stats_and_failing_callables():
    def broken():
        raise RuntimeError("runner went away")

    registry = build_registry(llm_stats=_FakeStats, runner_info=broken, telemetry_latest=lambda: {})
    server = serve(registry, "127.0.0.1", free_port())
    try:
        m = _scrape(server.port)
    finally:
        server.stop()
    assert m[("capacity_ttft_seconds_bucket", (("le", "0.001"), ("name", "x")))] == 1
    assert m[("capacity_ttft_seconds_bucket", (("le", "60.0"), ("name", "x")))] == 3      # 99.999 s only in +Inf
    assert m[("capacity_ttft_seconds_bucket", (("le", "+Inf"), ("name", "x")))] == 4
    assert m[("capacity_e2e_seconds_bucket", (("le", "5.0"), ("name", "x")))] == 0
    assert m[("capacity_e2e_seconds_bucket", (("le", "7.5"), ("name", "x")))] == 3
    assert m[("capacity_window_rps", (("name", "x"),))] == 0.5
    assert not any(name == "capacity_users" for name, _ in m)              # runner part dropped, rest served


def test_no_stats_yet_serves_valid_text():
    registry = build_registry(llm_stats=lambda: None, runner_info=dict, telemetry_latest=dict)
    server = serve(registry, "127.0.0.1", free_port())
    try:
        assert _scrape(server.port) == {}
    finally:
        server.stop()


def test_rebucket_counts_a_straddling_bucket_above_the_bound():
    assert rebucket([(0.9, 1), (1.0, 2), (1.01, 4)], [1.0, 2.0]) == [(1.0, 3), (2.0, 7)]
    assert rebucket([], [1.0]) == [(1.0, 0)]
    assert list(BUCKETS_S) == sorted(BUCKETS_S)


def test_flask_view_on_an_app():
    from flask import Flask

    app = Flask("t")
    stats = _stats()
    registry = build_registry(llm_stats=lambda: stats, runner_info=lambda: {"users": 3}, telemetry_latest=dict)
    app.add_url_rule("/metrics", "capacity_metrics", flask_view(registry))
    resp = app.test_client().get("/metrics")
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
    assert b"capacity_users 3.0" in resp.data and b'capacity_ttft_seconds_count{name="chat"} 4.0' in resp.data
