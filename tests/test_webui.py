"""The live view's routes on a real Locust WebUI (in-process Environment, Flask test client):
the LLM tab rows riding in /stats/requests, /llm/stats unrounded and reset with "Reset stats",
downloads, --web-base-path, --web-login (routes protected, /metrics open), lost workers."""

import time
from types import SimpleNamespace

import orjson
import pytest
from locust.argument_parser import parse_options
from locust.env import Environment
from locust.event import Events

from capacity_plugins import plugin
from capacity_plugins.client.client import LLMClient
from capacity_plugins.client.events import CapacityEvents
from capacity_plugins.client.users import LLMUser
from capacity_plugins.rehearsal.steps import Step
from capacity_plugins.sinks.stats import LLMStats
from capacity_plugins.webui.history import History
from capacity_plugins.webui.live import WorkerWatch, telemetry_summary
from capacity_plugins.webui.routes import _complete_size


class U(LLMUser):
    host = "http://127.0.0.1:1"


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    # Locust's WebUI re-parses sys.argv for the form's extra options; pytest's flags are not Locust's
    monkeypatch.setattr("sys.argv", ["locust"])


def make_env(tmp_path, *, web_login=False, base=None):
    ns = parse_options(args=[])  # Locust's own defaults; the plugin's options added below
    for k, v in dict(dialect="openai-chat", model="m", corpus="synthetic:prompt_tokens=10,output_tokens=5,n=20",
                     min_distinct=1, results_dir=str(tmp_path / "out"), exporter_port=0,
                     exporter_host="127.0.0.1", web_base_path=base, temperature=None, top_p=None).items():
        setattr(ns, k, v)
    env = Environment(user_classes=[U], events=Events(), host=U.host, parsed_options=ns)
    env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0, web_base_path=base, web_login=web_login, delayed_start=True)
    plugin.register(env)  # builds the live view too (local runner)
    live = env.capacity_live
    return env, LLMClient.of(env), live, web_ui.app.test_client()


def record(stats: LLMStats, ttft_ms: float, *, ok: bool = True, kind: str | None = None) -> None:
    stats.record("chat", ok=ok, error_kind=kind, ttft_ms=ttft_ms if ok else None, itl_ms=[5.0, 7.0],
                 tpot_ms=6.0, e2e_ms=ttft_ms + 100.0, output_tokens=3, prompt_tokens=10, now_unix=time.time())


def clear_stats_cache(env):
    env.web_ui.app.view_functions["locust.request_stats"].clear_cache()


def test_tab_rows_and_json_are_the_merged_unrounded_numbers_and_follow_reset(tmp_path):
    env, llm, live, client = make_env(tmp_path)
    for v in range(1, 101):
        record(llm.stats, float(v) + 0.37)
    record(llm.stats, 0, ok=False, kind="http_429")

    # the tab is declared in the template args the React app reads
    index = client.get("/").get_data(as_text=True)
    assert '"extended_tabs": [{"key": "llm", "title": "LLM"}]' in index
    assert "./llm/requests.jsonl" in index and "./llm/stats.csv" in index and "./llm/report.html" in index

    doc = client.get("/llm/stats").get_json()
    agg = next(r for r in doc["rows"] if r["name"] == "Aggregated")
    assert agg["requests"] == 101 and agg["failures"] == 1 and agg["errors_by_kind"] == {"http_429": 1}
    # unrounded: the sketch's value (≤ 0.5 % off the exact 50.37), not Locust's 2-significant-digit 50
    assert abs(agg["ttft_p50_ms"] - 50.37) <= 0.005 * 50.37 and agg["ttft_p50_ms"] != 50.0
    assert agg["ttft_p99_ms"] == llm.stats.rows()[-1]["ttft_p99_ms"]
    assert doc["workers"]["mode"] == "local" and doc["workers"]["lost"] == []
    assert doc["step"] is None

    body = client.get("/stats/requests").get_json()
    tab = next(e for e in body["extended_stats"] if e["key"] == "llm")["data"]
    chat = next(r for r in tab if r["name"] == "chat")
    assert chat["requests"] == 101 and chat["ttft_p50"] == f"{agg['ttft_p50_ms']:.1f}"
    assert any(r["name"] == "errors: http_429" and r["failures"] == 1 for r in tab)
    assert body["stats"] is not None  # Locust's own payload is still there

    assert client.post("/stats/reset").status_code == 200
    clear_stats_cache(env)
    assert next(r for r in client.get("/llm/stats").get_json()["rows"] if r["name"] == "Aggregated")["requests"] == 0
    tab = next(e for e in client.get("/stats/requests").get_json()["extended_stats"] if e["key"] == "llm")["data"]
    assert [r["name"] for r in tab] == ["Aggregated"] and tab[0]["requests"] == 0


def test_downloads_csv_jsonl_report(tmp_path):
    env, llm, live, client = make_env(tmp_path)
    for v in (10.0, 20.0, 30.0):
        record(llm.stats, v)
    csv_text = client.get("/llm/stats.csv").get_data(as_text=True)
    lines = csv_text.splitlines()
    assert lines[0].startswith("name,metric,count")
    assert any(line.startswith("chat,ttft,3,") for line in lines)

    # requests.jsonl: only complete lines, even while the writer is in the middle of one
    path = llm.records.path
    llm.records._file.flush()
    with path.open("ab") as f:
        f.write(b'{"request_id": "a", "ok": true}\n{"request_id": "b", "ok": true}\n{"request_id": "c", "ok"')
    got = client.get("/llm/requests.jsonl")
    assert got.status_code == 200
    assert got.data.splitlines() == [b'{"request_id": "a", "ok": true}', b'{"request_id": "b", "ok": true}']

    assert client.get("/llm/report.html").status_code == 404
    (live.results_dir / "report.html").write_text("<html>report</html>")
    got = client.get("/llm/report.html")
    assert got.status_code == 200 and b"report" in got.data

    page = client.get("/llm/charts")
    assert page.status_code == 200 and b"./history" in page.data
    assert client.get("/llm/history").get_json()["bucket_s"] >= 1


def test_web_base_path(tmp_path):
    env, llm, live, client = make_env(tmp_path, base="/base")
    record(llm.stats, 12.0)
    assert client.get("/base/llm/stats").status_code == 200
    assert client.get("/llm/stats").status_code == 404
    m = client.get("/base/metrics")
    assert m.status_code == 200 and b'capacity_ttft_seconds_count{name="chat"} 1.0' in m.data
    assert client.get("/metrics").status_code == 200


def test_index_page_loads_the_tab_script_relative_to_the_base_path(tmp_path):
    # The script and the bundled ECharts are served by the plugin, relative to the page: they work
    # under --web-base-path and behind a proxy that adds its own prefix (no CDN, no absolute path).
    env, llm, live, client = make_env(tmp_path, base="/base")
    page = client.get("/base/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert html.count('<script src="./llm/static/llm-tab.js" defer></script>') == 1
    assert html.index("llm-tab.js") > html.index("window.templateArgs")  # after Locust's own page data
    js = client.get("/base/llm/static/llm-tab.js")
    assert js.status_code == 200 and js.mimetype == "application/javascript"
    text = js.get_data(as_text=True)
    assert '"llm/live"' in text and '"llm/static/echarts.min.js"' in text and "https://" not in text
    lib = client.get("/base/llm/static/echarts.min.js")
    assert lib.status_code == 200 and len(lib.data) > 500_000 and b"Apache" in lib.data[:1000]
    assert client.get("/base/llm/static/../routes.py").status_code == 404
    assert client.get("/base/llm/static/charts.html").status_code == 404  # only the listed files
    assert client.get("/base/llm/live").get_json()["steps"] == []


def test_live_document_has_steps_swarm_and_simulated_telemetry(tmp_path):
    env, llm, live, client = make_env(tmp_path)
    now = time.time()
    s = Step(index=0, kind="concurrency", level=2, start_unix=now - 20, warmup_end_unix=now - 19, end_unix=now - 9,
             drain_end_unix=now - 8)
    env.capacity_events.step_started.fire(step=s)
    row = {"index": 0, "client_limited": True, "client_limited_reason": "generator CPU stayed above 90 % (local)",
           "min_requests": 10}
    env.capacity_steps = SimpleNamespace(
        live_rows=lambda now: [row],
        live_swarm=lambda now: [{"process": "local", "worker": None, "age_s": 0.0, "health": "ok", "in_flight": 2,
                                 "loop_lag_p99_ms": 3.0, "loop_lag_max_ms": 5.0}])
    env.shape_class = SimpleNamespace(phase="done", plans=[None] * 3, current=s)
    live.simulated = True
    doc = client.get("/llm/live").get_json()
    (step,) = doc["steps"]
    assert step["state"] == "finished" and step["level"] == 2 and doc["planned"] == 3
    assert not step["valid"] and step["invalid"][0]["label"] == "client-limited"
    assert "generator CPU" in step["invalid"][0]["reason"]
    assert doc["telemetry"]["simulated"] is True and doc["simulated"] is True
    (proc,) = doc["swarm"]["processes"]
    assert proc["process"] == "local" and proc["loop_lag_p99_ms"] == 3.0 and doc["swarm"]["mode"] == "local"
    assert set(doc) >= {"knee", "capacity", "slo", "history", "telemetry_history", "answer", "step"}
    # every telemetry value in the stock table says it is simulated too
    env.capacity_telemetry = SimpleNamespace(latest=lambda: {
        "sim": {"0": {"gpu_util_pct": {"value": 50.0}, "kv_cache_usage": {"value": 0.5}}}})
    record(llm.stats, 10.0)
    chat = next(r for r in live.table_rows() if r["name"] == "chat")
    assert chat["gpu_util"] == "50% (simulated)" and chat["kv_cache"] == "50.0% (simulated)"


def test_web_login_protects_llm_routes_but_not_metrics(tmp_path):
    from flask_login import UserMixin, login_user

    env, llm, live, client = make_env(tmp_path, web_login=True)
    app = env.web_ui.app
    app.config["SECRET_KEY"] = "test-only"

    class User(UserMixin):
        def __init__(self, uid):
            self.id = uid

    env.web_ui.login_manager.user_loader(User)

    @app.route("/test-login")
    def _login():
        login_user(User("alice"))
        return "ok"

    record(llm.stats, 15.0)
    for route in ("/llm/stats", "/llm/stats.csv", "/llm/requests.jsonl", "/llm/charts", "/llm/history", "/llm/live",
                  "/llm/static/llm-tab.js"):
        r = client.get(route)
        assert r.status_code == 302 and "/login" in r.headers["Location"], route
    m = client.get("/metrics")
    assert m.status_code == 200 and b"capacity_ttft_seconds_bucket" in m.data
    assert client.get("/test-login").status_code == 200
    r = client.get("/llm/stats")
    assert r.status_code == 200 and r.get_json()["rows"][0]["requests"] == 1


def test_worker_watch_keeps_lost_workers_after_locust_forgets_them():
    clients = {
        "a": SimpleNamespace(id="a", state="running", user_count=2, cpu_usage=10),
        "b": SimpleNamespace(id="b", state="running", user_count=2, cpu_usage=10),
    }
    runner = SimpleNamespace(clients=SimpleNamespace(all=clients.values()),
                             get_worker_index=lambda cid: {"a": 0, "b": 1}[cid])
    changes = []
    events = CapacityEvents()
    events.worker_lost.add_listener(lambda lost: changes.append(lost))
    watch = WorkerWatch(runner, events)
    watch.test_started()  # only a worker that goes while a test runs is lost
    watch.check(100.0)
    assert watch.snapshot()["count"] == 2 and changes == []
    clients["b"].state = "missing"
    watch.check(101.0)
    assert changes == [[{"worker": 1, "client_id": "b", "lost_unix": 101.0,
                         "reason": "no heartbeat (Locust marked it missing)"}]]
    del clients["b"]  # Locust drops a missing worker after HEARTBEAT_DEAD_INTERNAL
    watch.check(200.0)
    snap = watch.snapshot()
    assert snap["count"] == 1 and [w["worker"] for w in snap["lost"]] == [1] and len(changes) == 1


def test_history_buckets_by_end_time_and_keeps_order():
    h = History(bucket_s=2)

    def rec(sent, ttft, ok=True):
        return SimpleNamespace(sent_unix=sent, e2e_ms=500.0, ok=ok, ttft_ms=ttft, output_tokens=4)

    h.add(rec(100.0, 10.0))
    h.add(rec(104.0, 30.0))
    h.add(rec(101.6, 20.0))  # ends at 102.1: a late batch from a worker, between the two
    h.add(rec(104.0, None, ok=False))
    pts = h.points(now_unix=1000.0)
    assert [p["start_unix"] for p in pts] == [100, 102, 104]
    assert [p["ttft_p50_ms"] for p in pts] == pytest.approx([10.0, 20.0, 30.0], rel=0.01)
    assert pts[2]["requests"] == 2 and pts[2]["failures"] == 1 and pts[2]["output_tokens_per_s"] == 2.0
    assert [p["start_unix"] for p in h.points(now_unix=105.0)] == [100, 102]  # 104–106 still filling


def test_telemetry_summary_aggregates_devices():
    latest = {
        "gpu-host": {
            "0": {"gpu_util_pct": {"value": 80.0, "unit": "%"}, "vram_used_bytes": {"value": 2**30}},
            "1": {"gpu_util_pct": {"value": 40.0, "unit": "%"}, "vram_used_bytes": {"value": 3 * 2**30}},
        },
        "http://sim/metrics": {"server": {"server_waiting": {"value": 3}, "kv_cache_usage": {"value": 0.5}}},
        "http://sim2/metrics": {"server": {"server_waiting": {"value": 2}, "kv_cache_usage": {"value": 0.9}}},
    }
    s = telemetry_summary(latest)
    assert s["gpu_util_pct"] == 60.0 and s["vram_used_bytes"] == 4 * 2**30
    assert s["server_waiting"] == 5 and s["kv_cache_usage"] == 0.9 and s["server_running"] is None


def test_complete_size_ignores_a_partial_last_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_bytes(b"")
    assert _complete_size(p) == 0
    line = orjson.dumps({"x": "y" * 100_000}) + b"\n"  # longer than one read block
    p.write_bytes(line + b'{"half')
    assert _complete_size(p) == len(line)


def test_form_start_with_unset_sampling_options_sends_none(tmp_path):
    import gevent

    env, llm, live, client = make_env(tmp_path)
    # exactly what Locust's React form posts when the user only fills users and spawn rate
    form = {"user_count": "1", "spawn_rate": "1", "host": U.host, "run_time": "", "temperature": "", "top_p": ""}
    assert client.post("/swarm", data=form).get_json()["success"]
    try:
        deadline = time.time() + 5
        while env.runner.state not in ("running",) and time.time() < deadline:
            gevent.sleep(0.05)
        assert llm.params.temperature is None and llm.params.top_p is None
    finally:
        env.runner.quit()


def test_step_and_telemetry_reach_the_tab_json_and_metrics(tmp_path):
    env, llm, live, client = make_env(tmp_path)
    record(llm.stats, 20.0)
    # what the rehearsal attaches: its shape as Locust's shape_class (the running step, its phase,
    # the plan), its telemetry as capacity_telemetry (telemetry/wiring.py RunTelemetry)
    now = time.time()
    env.shape_class = SimpleNamespace(phase="run", plans=[None] * 5, current=Step(
        index=2, kind="concurrency", level=8, start_unix=now, warmup_end_unix=now + 1, end_unix=now + 60))
    env.capacity_telemetry = SimpleNamespace(latest=lambda: {
        "gpu-host": {"0": {"gpu_util_pct": {"value": 87.5, "unit": "%", "unix": 1.0},
                           "vram_used_bytes": {"value": 20 * 2**30, "unit": "B", "unix": 1.0},
                           "vram_total_bytes": {"value": 80 * 2**30, "unit": "B", "unix": 1.0}}},
        "http://sim/metrics": {"server": {"server_waiting": {"value": 4.0, "unit": "", "unix": 1.0},
                                          "kv_cache_usage": {"value": 0.42, "unit": "", "unix": 1.0}}},
    })
    doc = client.get("/llm/stats").get_json()
    assert doc["step"]["index"] == 2 and doc["step"]["level"] == 8 and doc["step"]["phase"] == "run"
    assert doc["telemetry"]["gpu_util_pct"] == 87.5 and doc["telemetry"]["kv_cache_usage"] == 0.42
    tab = next(e for e in client.get("/stats/requests").get_json()["extended_stats"] if e["key"] == "llm")["data"]
    chat = next(r for r in tab if r["name"] == "chat")
    assert chat["step"] == "3/5 8 users (run)"
    assert (chat["gpu_util"], chat["vram"], chat["queue"], chat["kv_cache"]) == ("88%", "20.0 / 80 GiB", "4", "42.0%")
    text = client.get("/metrics").get_data(as_text=True)
    assert "capacity_step_index 2.0" in text and "capacity_step_level 8.0" in text
    assert 'capacity_telemetry_gpu_util_pct{device="0",host="gpu-host"} 87.5' in text


def test_after_the_test_the_tab_and_json_say_the_analysis_plain_answer(tmp_path):
    # The analysis runs in a child process when a UI test stops and writes summary.json into the
    # results folder; the tab's first row, /llm/stats and /llm/answer then say its `answer`.
    import json

    env, llm, live, client = make_env(tmp_path)
    record(llm.stats, 10.0)
    folder = live.results_dir
    assert client.get("/llm/answer").get_json() == {"answer": None, "pending": False}
    assert client.get("/llm/stats").get_json()["answer"] is None

    # the test ended (steps.json written), the analysis not yet: the tab says to wait
    (folder / "steps.json").write_text("[]")
    env.runner.state = "stopped"
    tab = next(e for e in client.get("/stats/requests").get_json()["extended_stats"] if e["key"] == "llm")["data"]
    assert tab[0]["name"].startswith("ANSWER: the test ended and is being analysed")
    assert client.get("/llm/answer").get_json()["pending"] is True

    sentence = ("One node serves 8.51 req/s [7.87–9.17] within TTFT p95 ≤ 1.5 s. A peak of 20 req/s × 1.5 safety "
                "needs 4 nodes + 1 spare = 5; you have 1 → SCALE.")
    (folder / "summary.json").write_text(json.dumps({"answer": sentence, "verdict": {"decision": "scale"}}))
    (folder / "report.html").write_text("<html>report</html>")
    doc = client.get("/llm/answer").get_json()
    assert doc["answer"] == sentence and doc["decision"] == "scale" and doc["pending"] is False
    assert doc["report"] == "./llm/report.html" and client.get(doc["report"].lstrip(".")).status_code == 200
    assert client.get("/llm/stats").get_json()["answer"]["answer"] == sentence
    clear_stats_cache(env)
    tab = next(e for e in client.get("/stats/requests").get_json()["extended_stats"] if e["key"] == "llm")["data"]
    assert tab[0]["name"] == f"ANSWER: {sentence} — report: Download Data → Analysis report (./llm/report.html)"
    # the React table sorts rows by name: the answer's row stays above the request rows
    assert sorted(r["name"] for r in tab)[0] == tab[0]["name"]
