"""The live exporter wired into real Locust runs against the simulator: /metrics on the web UI
port, `--exporter-port` in a headless run, a real Prometheus server scraping it during the run,
and a taken port refused with one line."""

import socket
import subprocess
import urllib.parse

import pytest
from helpers.binaries import require_binary
from helpers.ports import free_port
from helpers.processes import run_locust
from helpers.prometheus import parse, value
from helpers.results import llm_row
from helpers.scenarios import llm_args
from helpers.simulator import LOADED
from helpers.waiting import wait_until
from helpers.web import get_json, http_get

pytestmark = pytest.mark.slow  # real locust processes

SIMULATOR = LOADED
CHAT = {"name": "openai-chat"}  # the dialect's row in the live numbers


def scrape(url: str) -> str:
    status, body, headers = http_get(url)
    assert status == 200, (url, status)
    assert headers["Content-Type"].startswith("text/plain")
    return body.decode()


def test_metrics_on_the_web_ui_port_during_a_run(simulator, locust_procs, tmp_path):
    port = free_port()
    p = locust_procs(["--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "3", "-r", "3",
                      *llm_args(simulator.url, tmp_path / "out")], tmp_path / "locust.log")
    base = f"http://127.0.0.1:{port}"
    first = wait_until(lambda: (t := scrape(f"{base}/metrics")) and (value(parse(t), "capacity_ttft_seconds_count", **CHAT)
                                                                      or 0) >= 5 and t,
                       40, "TTFT observations on /metrics", p)
    samples = parse(first)
    n1 = value(samples, "capacity_ttft_seconds_count", **CHAT)
    assert value(samples, "capacity_users") == 3
    assert 'capacity_runner_state{state="running"} 1.0' in first
    assert value(samples, "capacity_ttft_seconds_bucket", le="+Inf", **CHAT) == n1
    # the same live numbers as /llm/stats (a few more may have finished in between)
    llm = llm_row(get_json(f"{base}/llm/stats"))
    assert llm["ttft_count"] >= n1
    second = wait_until(lambda: (t := scrape(f"{base}/metrics"))
                        and value(parse(t), "capacity_ttft_seconds_count", **CHAT) > llm["ttft_count"] and t,
                        20, "the TTFT count to grow", p)
    assert value(parse(second), "capacity_output_tokens_total", **CHAT) > 0
    assert p.interrupt() == 0, p.log()[-2000:]


def test_headless_exporter_port_serves_the_swarm(simulator, locust_procs, tmp_path):
    port = free_port()
    p = locust_procs(["--headless", "-u", "2", "-r", "2", "-t", "8s", "--exit-code-on-error", "0", "--exporter-port", str(port),
                      *llm_args(simulator.url, tmp_path / "out")], tmp_path / "locust.log")
    url = f"http://127.0.0.1:{port}/metrics"
    text = wait_until(lambda: (t := scrape(url)) and (value(parse(t), "capacity_ttft_seconds_count", **CHAT) or 0) > 0
                      and t, 30, "headless /metrics", p)
    assert value(parse(text), "capacity_users") == 2
    assert "capacity_e2e_seconds_bucket" in text and "capacity_itl_seconds_bucket" in text
    assert "live metrics for Prometheus at http://127.0.0.1:" in p.log()
    # a request cut by the -t stop is a recorded failure (cancelled), not a failed run
    assert p.wait(60) == 0, p.log()[-2000:]
    assert "Traceback" not in p.log()


def test_exporter_port_taken_is_one_line_and_exit_2(simulator, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        p = run_locust(["--headless", "-u", "1", "-r", "1", "-t", "3s", "--exporter-port", str(taken),
                        *llm_args(simulator.url, tmp_path / "out")], timeout=60)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"capacity: --exporter-port {taken} on 127.0.0.1:" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.prometheus
def test_real_prometheus_scrapes_the_live_exporter_during_a_run(simulator, locust_procs, tmp_path):
    prometheus = require_binary("prometheus")
    exporter_port = free_port()
    p = locust_procs(["--headless", "-u", "2", "-r", "2", "-t", "30s", "--exporter-port", str(exporter_port),
                      *llm_args(simulator.url, tmp_path / "out")], tmp_path / "locust.log")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: capacity
    static_configs: [{{targets: ["127.0.0.1:{exporter_port}"]}}]
""")
    prom_port = free_port()
    prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{prom_port}"

    def query(expr: str) -> list:
        doc = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return doc["data"]["result"]

    try:
        def buckets():
            assert prom.poll() is None, prom.communicate()[1].decode()[-2000:]
            res = query('capacity_ttft_seconds_bucket{name="openai-chat"}')
            return res if any(float(r["value"][1]) > 0 for r in res) else None

        res = wait_until(buckets, 45, "Prometheus to store capacity_ttft_seconds_bucket", p, interval=0.5)
        assert {r["metric"]["le"] for r in res} >= {"0.001", "0.1", "+Inf"}
        assert p.proc.poll() is None  # scraped while the run was still going
        median = wait_until(lambda: query('histogram_quantile(0.5, sum by (le) (capacity_ttft_seconds_bucket))'),
                            10, "a TTFT median from PromQL", p)
        # the simulator answers in tens of ms on this machine; a broken bucket unit (ms as s) would be 1000× off
        assert 0.001 < float(median[0]["value"][1]) < 2.0, median
    finally:
        prom.terminate()
        prom.wait(10)
        p.interrupt()
