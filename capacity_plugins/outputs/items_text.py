"""An embeddings or rerank run (analysis/items.py) in words: the report's "Items" section — the
capacity per node in items/s, and per step items/s, input tokens/s and the E2E latency."""

from __future__ import annotations

import html

from capacity_plugins.contracts.summary import Items, ItemsStep, Summary
from capacity_plugins.outputs.numbers import fmt, fmt_iv, fmt_level
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs.tables import html_table, md_table

HEADERS = ["level", "items/s", "input tokens/s", "E2E P50 ms", "E2E P95 ms", "valid"]


def _cells(s: ItemsStep) -> list[str]:
    return [fmt_level(s.level), fmt_iv(s.items_per_s, s.items_per_s_ci), fmt(s.input_tokens_per_s, 0),
            fmt(s.e2e_p50_ms, 0), fmt(s.e2e_p95_ms, 0), "yes" if s.valid else "no"]


def _items(summary: Summary) -> Items:
    assert summary.item_rates is not None  # asked only when the summary has the section
    return summary.item_rates


def _capacity_line(items: Items) -> str:
    ci = items.per_node_items_per_s_ci
    if items.per_node_items_per_s is None or ci is None:
        return items.line
    return f"{items.line} (interval {fmt_iv(items.per_node_items_per_s, ci)})"


@report_section("item_rates")
class ItemsReport(ReportSection):
    def headline(self, summary: Summary) -> list[str]:
        return [_items(summary).line]

    def markdown(self, summary: Summary) -> list[str]:
        items = _items(summary)
        out = ["", f"## {items.kind.capitalize()} in items", "", f"- {_capacity_line(items)}", ""]
        return out + md_table(HEADERS, [_cells(s) for s in items.steps])

    def html(self, summary: Summary) -> str:
        items = _items(summary)
        return (f'<h2>{html.escape(items.kind.capitalize())} in items</h2><p id="items">'
                f"{html.escape(_capacity_line(items))}</p>"
                + html_table(HEADERS, [("" if s.valid else "invalid", _cells(s)) for s in items.steps]))
