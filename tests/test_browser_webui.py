"""Headless Chromium drives a real Locust web UI started against the simulator: start a test from
the form, open the LLM tab, TTFT values appear and change; the charts page draws; screenshots
go to test-artifacts/ (look at them: the assertions cannot tell a pretty table from an ugly one)."""

import re

import pytest
from helpers.binaries import require_binary
from helpers.paths import ARTIFACTS
from helpers.ports import free_port
from helpers.scenarios import llm_args
from helpers.simulator import LOADED
from helpers.waiting import wait_until
from helpers.web import get_json

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium driving a real locust process

SIMULATOR = LOADED
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _cells(page, row_name: str) -> dict[str, str]:
    """The LLM tab's row `row_name` as {column title: cell text}."""
    # the stock table: the tab's own tables (steps, swarm) above it carry the class cap-table
    heads = [h.inner_text().replace("\n", " ").strip() for h in page.locator("table:not(.cap-table) thead th").all()]
    for row in page.locator("table:not(.cap-table) tbody tr").all():
        cells = [c.inner_text().strip() for c in row.locator("td").all()]
        if cells and cells[0] == row_name:
            return dict(zip(heads, cells, strict=False))
    return {}


def test_llm_tab_in_a_real_browser(simulator, locust_procs, tmp_path):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    port = free_port()
    # No --temperature/--top-p: the form posts those unset options back as "", which must mean
    # "unset" (test_webui checks the requests; here every request must succeed).
    p = locust_procs(["--web-host", "127.0.0.1", "--web-port", str(port),
                      *llm_args(simulator.url, tmp_path / "out")], tmp_path / "locust.log")
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: get_json(f"{base}/llm/stats"), 30, "the web UI", p)
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1700, "height": 750})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base + "/")
            # the start form (tabs, ours included, only exist once a test runs)
            page.locator('input[name="userCount"]').fill("3")
            page.locator('input[name="spawnRate"]').fill("3")
            page.get_by_role("button", name="Start").click()
            page.get_by_role("tab", name="LLM").click(timeout=20_000)
            assert "tab=llm" in page.url

            def ttft_row():
                row = _cells(page, "openai-chat")
                ok = row and re.fullmatch(r"\d+(\.\d+)?", row.get("TTFT p50 (ms)", "")) and int(row["# Requests"]) >= 3
                return row if ok else None

            first = wait_until(ttft_row, 30, "TTFT values in the LLM tab", p, interval=0.5)
            assert float(first["TTFT p50 (ms)"]) > 0 and float(first["TTFT p99 (ms)"]) >= float(first["TTFT p50 (ms)"])
            assert re.fullmatch(r"\d+(\.\d+)?", first["ITL p50 (ms)"]) and float(first["Output tok/s"]) > 0
            # the tab refreshes with the rest of the UI: the count grows and the TTFT numbers move
            cols = ("TTFT p50 (ms)", "TTFT p95 (ms)", "TTFT p99 (ms)")
            later = wait_until(lambda: (r := ttft_row()) and int(r["# Requests"]) > int(first["# Requests"])
                               and any(r[c] != first[c] for c in cols) and r, 40, "TTFT values to change", p,
                               interval=0.5)
            # the tab shows what /llm/stats says (same source, rounded for display)
            agg = next(r for r in get_json(f"{base}/llm/stats")["rows"] if r["name"] == "openai-chat")
            assert agg["requests"] >= int(later["# Requests"])
            assert agg["failures"] == 0, agg  # a form-started test sends valid requests
            # a plain run (no scenario): the tab's own parts draw the over-time charts, no step table
            page.wait_for_selector('#capacity-llm [data-chart="rate"] canvas', timeout=15_000)
            assert "No scenario" in page.locator('#capacity-llm [data-part="steps"]').inner_text()
            page.screenshot(path=str(ARTIFACTS / "webui_llm_tab.png"), full_page=True)
            assert errors == [], errors

            page.get_by_role("tab", name="Download Data").click()
            links = {a.inner_text(): a.get_attribute("href") for a in page.locator("a").all()}
            assert any(h == "./llm/requests.jsonl" for h in links.values()), links
            assert any(h == "./llm/stats.csv" for h in links.values()), links

            charts = browser.new_page(viewport={"width": 1400, "height": 900})
            charts.goto(base + "/llm/charts")
            charts.wait_for_selector('#ttft path[data-series="ttft_p50_ms"]', timeout=15_000)
            charts.screenshot(path=str(ARTIFACTS / "webui_llm_charts.png"), full_page=True)
        finally:
            browser.close()
    assert p.interrupt() == 0, p.log()[-2000:]
    assert "Traceback" not in p.log()
