"""Headless Chromium watches a real sweep in the LLM tab: a master (web UI under --web-base-path, as
behind a proxy or `kubectl port-forward`) and one worker run a 3-level concurrency sweep against the
simulator, telemetry scraped from it. Mid-run and at the end: every per-step chart has one point per
finished step, every over-time chart one band per finished step, the SLO limits are drawn, the step
table has one row per finished step, the swarm shows the worker, telemetry is marked simulated,
nothing is logged as an error; at the end the tab says the analysis's plain answer and links the
report. Screenshots go to test-artifacts/."""

import subprocess

import pytest
from helpers.binaries import require_binary
from helpers.paths import ARTIFACTS
from helpers.ports import free_port
from helpers.processes import locust_argv, popen
from helpers.scenarios import write_scenario
from helpers.simulator import LOADED
from helpers.waiting import wait_until
from helpers.web import get_json

# Chromium driving real locust processes; it waits on them and asserts no timing: beside the measured tests
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.background]

SIMULATOR = LOADED
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PREFIX = "/proxy/locust"
LEVELS = [1, 2, 4]
PER_STEP = {"throughput": ["achieved"], "ttft": ["ttft_p50", "ttft_p95"], "itl": ["tpot_p95", "itl_p95"],
            "e2e": ["e2e_p95"]}
OVER_TIME = ["rate", "tokens", "gpu", "queue"]

# What the page drew, read from the charts themselves (ECharts' getOption) and the tables.
DRAWN_JS = """() => {
  const st = window.capacityLLM;
  if (!st || !st.drawnDoc) return null;
  const charts = {};
  for (const [key, c] of Object.entries(st.charts)) {
    charts[key] = c.getOption().series.map((s) => ({
      id: s.id, points: (s.data || []).filter((d) => d.value && d.value[1] != null).length,
      bands: s.markArea ? (s.markArea.data || []).map((d) => d[0].name) : [],
      lines: s.markLine ? (s.markLine.data || []).map((d) => d.name) : []}));
  }
  const rows = (sel) => Array.from(document.querySelectorAll(sel)).map((tr) => tr.dataset.step);
  return {
    finished: st.drawnDoc.steps.filter((s) => s.state === "finished").map((s) => s.index),
    levels: st.drawnDoc.steps.map((s) => s.level),
    charts,
    finishedRows: rows('table[data-table="steps"] tbody tr[data-state="finished"]'),
    runningRows: rows('table[data-table="steps"] tbody tr[data-state="running"]'),
    answer: (document.querySelector('[data-answer="final"]') || {}).textContent || null,
    report: (document.querySelector('a[data-link="report"]') || {}).href || null,
    reportText: (document.querySelector('a[data-link="report"]') || {}).textContent || null,
    swarm: Array.from(document.querySelectorAll('table[data-table="swarm"] tbody tr')).map((tr) => [tr.dataset.process, tr.dataset.health]),
    simulated: document.querySelectorAll('#capacity-llm [data-simulated="true"]').length,
  };
}"""


def check_drawn(drawn: dict) -> int:
    """One point per finished step on every per-step chart, one band per finished step over time."""
    finished = drawn["finished"]
    n = len(finished)
    assert drawn["levels"][: len(drawn["levels"])] == LEVELS[: len(drawn["levels"])], drawn["levels"]
    for chart, ids in PER_STEP.items():
        series = {s["id"]: s for s in drawn["charts"][chart]}
        for sid in ids:
            assert series[sid]["points"] == n, (chart, sid, series[sid], finished)
    for chart in OVER_TIME:
        bands = drawn["charts"][chart][0]["bands"]
        labels = {b.split(":")[0] for b in bands}
        assert {f"S{i + 1}" for i in finished} <= labels, (chart, bands, finished)
        assert len(bands) <= len(drawn["levels"]), bands  # no band for a step that never started
    ttft_lines = [name for s in drawn["charts"]["ttft"] for name in s["lines"]]
    assert any(name.startswith("SLO TTFT") for name in ttft_lines), ttft_lines
    assert drawn["finishedRows"] == [str(i) for i in finished], drawn
    assert drawn["simulated"] >= 1  # scraped from the simulator: its readings say so
    return n


def test_llm_tab_watches_a_distributed_sweep_under_a_base_path(simulator, locust_procs, tmp_path):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    sc = write_scenario(
        tmp_path, "tab",
        target={"url": simulator.url, "model": "sim-model"},
        corpus={"path": "synthetic:prompt_tokens=40,output_tokens=16,n=1500", "min_distinct": 10},
        request={"max_tokens": 16, "timeout_s": 10},
        # background: at nice 19 beside the measured tests, so the generator's own limit is loose
        load={"kind": "concurrency_sweep", "levels": LEVELS, "step_s": 4, "warmup_s": 1, "max_loop_lag_p99_ms": 500},
        slo={"ttft_p95_ms": 400, "tpot_p95_ms": 50},
        telemetry={"scrape": [{"url": simulator.url + "/metrics", "kind": "simulator"}], "interval_s": 0.5},
    )
    web, master_port = free_port(), free_port()
    master = locust_procs(["--scenario", str(sc), "--master", "--master-bind-host", "127.0.0.1",
                           "--master-bind-port", str(master_port), "--expect-workers", "1",
                           "--web-host", "127.0.0.1", "--web-port", str(web), "--web-base-path", PREFIX,
                           "--autostart", "--autoquit", "60"], tmp_path / "master.log")
    worker = popen(locust_argv(["--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)]),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{web}{PREFIX}"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        wait_until(lambda: get_json(f"{base}/llm/live"), 40, "the web UI under its base path", master)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(base + "/")
                page.get_by_role("tab", name="LLM").click(timeout=40_000)

                # -- mid-run: a step finished, the next one running ---------------------------------------
                def mid_run():
                    drawn = page.evaluate(DRAWN_JS)
                    return drawn if drawn and drawn["finished"] and drawn["runningRows"] else None

                drawn = wait_until(mid_run, 60, "a finished step and a running one in the tab", master, interval=0.5)
                assert 1 <= check_drawn(drawn) < len(LEVELS)
                assert ["worker-0", "ok"] in drawn["swarm"] or ["worker-0", "late"] in drawn["swarm"], drawn["swarm"]
                assert any(p == "master" for p, _ in drawn["swarm"]), drawn["swarm"]
                page.screenshot(path=str(ARTIFACTS / "webui_llm_tab_running.png"), full_page=True)

                # -- the end: every step finished, the analysis's answer and the report's link ------------
                answer = wait_until(lambda: (a := (get_json(f"{base}/llm/answer") or {})).get("report") and a, 90,
                                    "the analysis's answer", master)

                def final():
                    drawn = page.evaluate(DRAWN_JS)
                    return drawn if drawn and drawn["answer"] and drawn["reportText"] == "Open the analysis report" else None

                drawn = wait_until(final, 20, "the answer in the tab", master, interval=0.5)
                assert check_drawn(drawn) == len(LEVELS) and not drawn["runningRows"]
                assert answer["answer"] in drawn["answer"]
                assert drawn["report"] == f"{base}/llm/report.html"  # relative to the prefixed page
                report = page.request.get(drawn["report"])
                assert report.status == 200 and "<html" in report.text().lower()[:2000]
                page.screenshot(path=str(ARTIFACTS / "webui_llm_tab_answer.png"), full_page=True)
                assert errors == [], errors
            finally:
                browser.close()
    finally:
        worker.terminate()
        worker.wait(15)
    master.interrupt()
    assert "Traceback" not in master.log(), master.log()[-3000:]
