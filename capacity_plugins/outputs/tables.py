"""Tables in summary.md and report.html: a header and rows of cells already in words."""

from __future__ import annotations

import html


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines (a `|` inside a cell becomes `/`)."""
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows])


def html_table(head: list[str], rows: list[tuple[str, list[str]]], left: frozenset[int] | set[int] = frozenset(),
               attrs: str = "") -> str:
    """An HTML table: head, then (row class, cells) rows; columns in `left` align left (words)."""
    e = html.escape

    def tag(name: str, i: int) -> str:
        return f"<{name} class=l>" if i in left else f"<{name}>"

    return (f"<table{attrs}><tr>" + "".join(tag("th", i) + e(h) + "</th>" for i, h in enumerate(head)) + "</tr>"
            + "".join("<tr" + (f' class="{cls}"' if cls else "") + ">"
                      + "".join(tag("td", i) + e(c) + "</td>" for i, c in enumerate(cells)) + "</tr>"
                      for cls, cells in rows) + "</table>")
