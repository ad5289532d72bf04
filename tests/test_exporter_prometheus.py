"""A real Prometheus server (Debian package) on loopback scrapes the live exporter and a vLLM+DCGM
endpoint; its query API returns the TTFT histogram, and PromQL mode reads the series back."""

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from conftest import free_port, require_binary
from fixtures_telemetry import canned_url_fixture  # noqa: F401

from capacity_plugins.sinks.stats import LLMStats
from capacity_plugins.telemetry.promql import DEFAULT_QUERIES, query_range
from capacity_plugins.webui.exporter import build_registry, serve

pytestmark = pytest.mark.prometheus


def test_promtool_accepts_shipped_config(repo_root):
    promtool = require_binary("promtool")
    out = subprocess.run([promtool, "check", "config", str(repo_root / "deploy/prometheus/prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _query(base: str, expr: str) -> list:
    return _get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]


def test_prometheus_scrapes_exporter_and_promql_mode_reads_back(canned_url, tmp_path):
    prometheus = require_binary("prometheus")
    stats = LLMStats()
    now = time.time()
    for ttft_ms in (30.0, 40.0, 45.0, 200.0):
        stats.record("chat", ok=True, error_kind=None, ttft_ms=ttft_ms, itl_ms=[10.0], tpot_ms=10.0,
                     e2e_ms=ttft_ms + 50, output_tokens=2, prompt_tokens=5, now_unix=now)
    registry = build_registry(llm_stats=lambda: stats, runner_info=lambda: {"users": 4, "step": 1},
                              telemetry_latest=dict)
    exporter = serve(registry, "127.0.0.1", free_port())
    canned_port = canned_url.rsplit(":", 1)[1]
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: capacity
    static_configs: [{{targets: ["127.0.0.1:{exporter.port}"]}}]
  - job_name: sim
    metrics_path: /sim/metrics
    static_configs: [{{targets: ["127.0.0.1:{canned_port}"]}}]
""")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t_start = time.time()
        deadline = time.time() + 60
        ttft: list = []
        waiting: list = []
        while time.time() < deadline:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            try:
                ttft = _query(base, 'capacity_ttft_seconds_count{name="chat"}')
                waiting = _query(base, "vllm:num_requests_waiting")
            except OSError:
                ttft = waiting = []
            if ttft and waiting:
                break
            time.sleep(0.5)
        assert ttft and float(ttft[0]["value"][1]) == 4
        median = _query(base, 'histogram_quantile(0.5, sum by (le) (capacity_ttft_seconds_bucket))')
        assert 0.025 < float(median[0]["value"][1]) <= 0.05
        assert float(_query(base, "capacity_users")[0]["value"][1]) == 4

        # query_range evaluates at t_start + k s only, so a first sample scraped after the last grid
        # point <= now (the instant query above already sees it) is not in the range yet: ask again,
        # as the window grows, until every expected series is there or the deadline passes.
        queries = {k: DEFAULT_QUERIES[k] for k in ("gpu_util_pct", "server_waiting", "vram_used_bytes")}
        want = {("gpu_util_pct", "gpu-node-1", "1"), ("vram_used_bytes", "gpu-node-1", "0"),
                ("server_waiting", f"127.0.0.1:{canned_port}", "meta-llama/Llama-3.1-8B-Instruct")}
        deadline = time.time() + 30
        while True:
            gaps: list = []
            rows = query_range(base, queries, start=t_start, end=time.time(), step_s=1.0, gaps=gaps)
            assert gaps == []
            by = {(r["series"], r["host"], r["device"]): r["value"] for r in rows}
            if want <= by.keys() or time.time() > deadline:
                break
            time.sleep(0.2)
        assert by[("gpu_util_pct", "gpu-node-1", "1")] == 91
        assert by[("vram_used_bytes", "gpu-node-1", "0")] == 61440 * 2**20
        assert by[("server_waiting", f"127.0.0.1:{canned_port}", "meta-llama/Llama-3.1-8B-Instruct")] == 5
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        exporter.stop()
