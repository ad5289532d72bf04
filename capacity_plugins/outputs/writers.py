"""The built-in writers: which file each format writes, from the renderers next to this module.

Registered in the order they write: summary.json first (a writer that fails leaves the summary
behind), then steps.csv, summary.md, the PNGs and report.html. The renderers return text and bytes;
only these functions touch the folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from capacity_plugins.contracts.summary import RepeatSetSummary, Summary
from capacity_plugins.outputs import registry, repeats_report, report, report_text
from capacity_plugins.outputs.registry import Analysed, Subject, register


def write(a: Analysed, dest: Path, names: Iterable[str] | None = None, *, of: Subject = "run") -> None:
    """`registry.write` with the built-in writers below registered (importing this module does it)."""
    registry.write(a, dest, names, of=of)


def _text(dest: Path, name: str, text: str) -> None:
    (dest / name).write_text(text, encoding="utf-8")


def _run(a: Analysed) -> Summary:
    assert isinstance(a.summary, Summary), "a run's writer was given a repeat set's summary"
    return a.summary


def _set(a: Analysed) -> RepeatSetSummary:
    assert isinstance(a.summary, RepeatSetSummary), "a set's writer was given a run's summary"
    return a.summary


# ------------------------------------------------------------------------------ a single run


@register("json")
def summary_json(a: Analysed, dest: Path) -> None:
    _run(a).save(dest / "summary.json")  # inf / NaN → null: strict JSON (contracts/document.py)


@register("csv")
def steps_csv(a: Analysed, dest: Path) -> None:
    _text(dest, "steps.csv", report_text.steps_csv(_run(a)))


@register("md")
def summary_md(a: Analysed, dest: Path) -> None:
    _text(dest, "summary.md", report_text.markdown(_run(a)))


def _figures(a: Analysed) -> dict[str, bytes | None]:
    """The run's plots, rendered once for both the PNG files and the page that embeds them."""
    if "figures" not in a.rendered:
        if a.run is None:
            raise ValueError("the plots of a run need its data (Analysed.run)")
        a.rendered["figures"] = report.figures(_run(a), a.run)
    figs: dict[str, bytes | None] = a.rendered["figures"]
    return figs


@register("png")
def plots_png(a: Analysed, dest: Path) -> None:
    for stem, data in _figures(a).items():
        if data is not None:
            (dest / f"{stem}.png").write_bytes(data)


@register("html")
def report_html(a: Analysed, dest: Path) -> None:
    _text(dest, "report.html", report.html_page(_run(a), _figures(a)))


# ------------------------------------------------------------------------------ a repeat set


@register("json", of="set")
def set_summary_json(a: Analysed, dest: Path) -> None:
    _set(a).save(dest / "summary.json")


@register("md", of="set")
def set_summary_md(a: Analysed, dest: Path) -> None:
    _text(dest, "summary.md", repeats_report.set_markdown(_set(a)))


def _set_plot(a: Analysed) -> bytes:
    if "throughput_repeats" not in a.rendered:
        a.rendered["throughput_repeats"] = repeats_report.throughput_plot(_set(a))
    data: bytes = a.rendered["throughput_repeats"]
    return data


@register("png", of="set")
def set_plot_png(a: Analysed, dest: Path) -> None:
    (dest / "throughput_repeats.png").write_bytes(_set_plot(a))


@register("html", of="set")
def set_report_html(a: Analysed, dest: Path) -> None:
    _text(dest, "report.html", repeats_report.set_page(_set(a), _set_plot(a)))
