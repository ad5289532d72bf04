"""report.html as a planner opens it: headless Chromium at 1 280 px. The page does not scroll
sideways (not even with the full load table unfolded), the plain answer is the first thing after
the title, and every plot is drawn. Screenshots go to test-artifacts/ (look at them: the assertions
cannot tell a readable page from a cramped one)."""

from __future__ import annotations

import pytest
from helpers.analysis_data import make_results
from helpers.binaries import require_binary
from helpers.paths import ARTIFACTS
from helpers.processes import capacity

from capacity_plugins.analysis.answer import plain_answer
from capacity_plugins.contracts.summary import Summary

pytestmark = pytest.mark.browser  # no Locust: a synthetic folder through `capacity analyze`, then Chromium

WIDTH = 1280
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# A sweep that saturates at 8 users with GPU and queue telemetry: every section and plot of a real run.
SEED = dict(levels=[1, 2, 4, 8, 16, 32], rps=[2.1, 4.0, 7.2, 9.0, 9.1, 9.2],
            e2e_p50_ms=[480, 520, 620, 850, 1700, 3400], e2e_p99_ms=[520, 600, 800, 1500, 2600, 5200],
            gpu_util=[20, 38, 70, 92, 95, 96], waiting=[0, 0, 1, 3, 9, 25])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = make_results(tmp_path_factory.mktemp("run"), **SEED)
    r = capacity("analyze", str(folder), "--peak-qps", "20", "--current-nodes", "1", "--gpu-hour-usd", "2.5")
    assert r.returncode == 0, r.stderr
    return folder


def test_the_report_reads_at_1280_px(report):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    summary = Summary.load(report / "summary.json")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto((report / "report.html").as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(ARTIFACTS / "report_1280_top.png"))
            page.screenshot(path=str(ARTIFACTS / "report_1280.png"), full_page=True)

            # no horizontal scroll at 1 280 px
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH

            # the plain answer is the first text after the title
            lines = [ln.strip() for ln in page.evaluate("document.body.innerText").splitlines() if ln.strip()]
            assert lines[0].startswith("Capacity report"), lines[:3]
            assert lines[1] == plain_answer(summary), lines[:3]
            assert page.locator("#answer").is_visible()

            # every plot drawn: loaded, decoded, with pixels
            imgs = page.evaluate("[...document.images].map(i => [i.alt, i.complete, i.naturalWidth, i.width])")
            pngs = sorted(f.name for f in report.glob("*.png"))  # each plot the analysis drew is on the page
            # throughput/latency, distributions, timeline; the Pareto view's plot lives in its section only
            sections_own = int(page.locator("#pareto").count() > 0)
            assert len(imgs) == len(pngs) + sections_own >= 3 + sections_own, (imgs, pngs)
            for alt, complete, natural, shown in imgs:
                assert complete and natural > 0 and 0 < shown <= WIDTH, (alt, complete, natural, shown)

            # the short table fits; the full one unfolds inside its own scroll box, the page still does not
            heads = page.locator("#load-table tr").first.locator("th").all_inner_texts()
            assert 8 <= len(heads) <= 10, heads
            page.locator("#full-table > summary").click()
            assert page.locator("#full-table table").is_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
            page.screenshot(path=str(ARTIFACTS / "report_1280_full_table.png"), full_page=True)
            assert page.locator('#full-table a[href="steps.csv"]').count() == 1
        finally:
            browser.close()
