"""A real Prometheus server (Debian package) on loopback scrapes the live exporter and a vLLM+DCGM
endpoint; its query API returns the TTFT histogram, and PromQL mode reads the series back."""

import subprocess
import time
import urllib.parse

import pytest
from helpers.binaries import require_binary
from helpers.paths import ROOT
from helpers.ports import free_port
from helpers.processes import Watch
from helpers.waiting import wait_until
from helpers.web import get_json

from capacity_plugins.sinks.stats import LLMStats
from capacity_plugins.telemetry.promql import DEFAULT_QUERIES, query_range
from capacity_plugins.webui.exporter import build_registry, serve

pytestmark = pytest.mark.prometheus


def test_promtool_accepts_shipped_config():
    promtool = require_binary("promtool")
    out = subprocess.run([promtool, "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _query(base: str, expr: str) -> list:
    return get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]


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
        ttft, _ = wait_until(lambda: (q := (_query(base, 'capacity_ttft_seconds_count{name="chat"}'),
                                            _query(base, "vllm:num_requests_waiting"))) and all(q) and q,
                             60, "both scrape jobs in Prometheus", Watch(proc), interval=0.5)
        assert float(ttft[0]["value"][1]) == 4
        median = _query(base, 'histogram_quantile(0.5, sum by (le) (capacity_ttft_seconds_bucket))')
        assert 0.025 < float(median[0]["value"][1]) <= 0.05
        assert float(_query(base, "capacity_users")[0]["value"][1]) == 4

        # query_range evaluates at t_start + k s only, so a first sample scraped after the last grid
        # point <= now (the instant query above already sees it) is not in the range yet: ask again,
        # as the window grows, until every expected series is there or the deadline passes.
        queries = {k: DEFAULT_QUERIES[k] for k in ("gpu_util_pct", "server_waiting", "vram_used_bytes")}
        want = {("gpu_util_pct", "gpu-node-1", "1"), ("vram_used_bytes", "gpu-node-1", "0"),
                ("server_waiting", f"127.0.0.1:{canned_port}", "meta-llama/Llama-3.1-8B-Instruct")}
        def series() -> dict | None:
            gaps: list = []
            rows = query_range(base, queries, start=t_start, end=time.time(), step_s=1.0, gaps=gaps)
            if gaps:
                pytest.fail(f"query_range reported gaps: {gaps}")  # an error: waiting longer cannot help
            by = {(r["series"], r["host"], r["device"]): r["value"] for r in rows}
            return by if want <= by.keys() else None

        by = wait_until(series, 30, f"the series {sorted(want)} in query_range", interval=0.2)
        assert by[("gpu_util_pct", "gpu-node-1", "1")] == 91
        assert by[("vram_used_bytes", "gpu-node-1", "0")] == 61440 * 2**20
        assert by[("server_waiting", f"127.0.0.1:{canned_port}", "meta-llama/Llama-3.1-8B-Instruct")] == 5
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        exporter.stop()
