"""Latency by image count (analysis/images.py) in words: the report's "Images" section — the
sentence first, then each step's requests grouped by how many images they carried (summary.md,
report.html and the terminal)."""

from __future__ import annotations

import html

from capacity_plugins.contracts.image_latency import ImageGroup, ImageLatency, ImageStep
from capacity_plugins.contracts.summary import Summary
from capacity_plugins.outputs.numbers import fmt_level, fmt_num
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

HEADERS = ["load level", "images", "requests", "TTFT p50 ms", "TTFT p95 ms", "E2E p50 ms", "E2E p95 ms",
           "prompt tokens (mean)"]
METHOD = ("each step's successful measured requests grouped by the images they carried (null = 0); "
          "nearest-rank percentiles; the per-image figure is the least-squares slope of TTFT p50 over the "
          "image count at the level named")


def _cells(s: ImageStep, g: ImageGroup) -> list[str]:
    return [fmt_level(s.level), str(g.images), str(g.requests), fmt_num(g.ttft_p50_ms), fmt_num(g.ttft_p95_ms),
            fmt_num(g.e2e_p50_ms), fmt_num(g.e2e_p95_ms), fmt_num(g.prompt_tokens_mean)]


def _images(summary: Summary) -> ImageLatency:
    assert summary.images is not None  # asked only when the summary has the section
    return summary.images


@report_section("images")
class ImagesReport(ReportSection):
    def markdown(self, summary: Summary) -> list[str]:
        im = _images(summary)
        out = ["", "## Images", "", f"- {im.line}", f"- method: {METHOD}", ""]
        return out + md_table(HEADERS, [_cells(s, g) for s in im.steps for g in s.groups])

    def html(self, summary: Summary) -> str:
        im = _images(summary)
        return (f'<h2>Images</h2><p id="images">{html.escape(im.line)}</p><ul><li>{html.escape(METHOD)}</li></ul>'
                + html_table(HEADERS, [("", _cells(s, g)) for s in im.steps for g in s.groups],
                             attrs=' id="image-steps"'))

    def headline(self, summary: Summary) -> list[str]:
        return [f"images: {_images(summary).line}"]
