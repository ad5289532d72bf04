"""A scenario rehearsal in the web UI (plain `locust --scenario`, --autostart) against the simulator
with telemetry scraping its /metrics: the tab, /llm/stats and /metrics show the running step and
level and the simulator's GPU / queue / KV-cache readings."""

import re

import pytest
from helpers.ports import free_port
from helpers.results import llm_tab
from helpers.scenarios import write_scenario
from helpers.simulator import LOADED
from helpers.waiting import wait_until
from helpers.web import get_json, http_get

pytestmark = pytest.mark.slow  # a real locust process

SIMULATOR = LOADED


def test_rehearsal_step_and_telemetry_live(simulator, locust_procs, tmp_path):
    sc = write_scenario(
        tmp_path, "live",
        target={"url": simulator.url, "model": "sim-model"},
        request={"max_tokens": 16, "timeout_s": 10},
        load={"kind": "concurrency_sweep", "levels": [2, 4], "step_s": 6, "warmup_s": 1},
        telemetry={"scrape": [{"url": simulator.url + "/metrics", "kind": "simulator"}], "interval_s": 0.5},
    )
    port = free_port()
    p = locust_procs(["--scenario", str(sc), "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                      # Locust: Ctrl-C during an --autostart shape only stops the test; --autoquit ends the process
                      "--autoquit", "1"],
                     tmp_path / "locust.log")
    base = f"http://127.0.0.1:{port}"

    def live():
        doc = get_json(f"{base}/llm/stats")
        tel = doc["telemetry"]
        ok = doc["step"] and doc["rows"][-1]["requests"] > 0 and tel["gpu_util_pct"] is not None \
            and tel["kv_cache_usage"] is not None
        return doc if ok else None

    doc = wait_until(live, 40, "step + telemetry in /llm/stats", p, interval=0.5)
    step = doc["step"]
    assert step["of"] == 2 and step["level"] in (2, 4) and step["unit"] == "users" and step["kind"] == "concurrency"
    assert 0 <= doc["telemetry"]["gpu_util_pct"] <= 100 and 0 <= doc["telemetry"]["kv_cache_usage"] <= 1
    assert doc["telemetry"]["server_waiting"] is not None

    tab = llm_tab(get_json(f"{base}/stats/requests"))
    row = next(r for r in tab if r["name"] == "Aggregated")
    assert re.fullmatch(r"[12]/2 [24] users \((run|drain|settle)\)", row["step"]), row["step"]
    # scraped from the simulator (kind: simulator): every telemetry value says it is simulated
    assert row["gpu_util"].endswith("% (simulated)") and row["kv_cache"].endswith("% (simulated)")
    assert row["queue"].endswith(" (simulated)")
    live = get_json(f"{base}/llm/live")
    assert live["simulated"] is True and live["telemetry"]["simulated"] is True

    status, body, _ = http_get(f"{base}/metrics")
    text = body.decode()
    assert status == 200 and re.search(r"^capacity_step_level [24]\.0$", text, re.M), text[-2000:]
    assert "capacity_telemetry_gpu_util_pct{" in text and "capacity_telemetry_kv_cache_usage{" in text
    # the second step's level shows up while it runs
    wait_until(lambda: get_json(f"{base}/llm/stats")["step"]["level"] == 4, 30, "step 2 of the sweep", p,
               interval=0.5)
    p.interrupt()
    assert "Traceback" not in p.log(), p.log()[-3000:]
