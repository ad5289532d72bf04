"""The writers of an analysed run, registered by name.

A writer is one output format — `json` (summary.json), `csv` (steps.csv), `md` (summary.md), `png`
(the plots), `html` (report.html) — written from what analysis/ computed into a folder:

    @register("md")
    def summary_md(analysed: Analysed, dest: Path) -> None:
        (dest / "summary.md").write_text(markdown(analysed.summary), encoding="utf-8")

A single run and a repeat set each have their own writers (`of="run"`, `of="set"`): a set's page is
about the spread between its repeats, not one run's table. `write` runs them in the order they were
registered (summary.json first: a writer that fails leaves the summary behind). A new format is one
module with its `@register` and one import line in outputs/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.contracts.summary import AnySummary

Subject = Literal["run", "set"]


@dataclass(eq=False)
class Analysed:
    """What the writers render: the summary, and for a single run the data read from its folder."""

    summary: AnySummary  # a Summary for a run's writers, a RepeatSetSummary for a set's
    run: RunData | None = None  # a run's records and telemetry (the plots need them); None for a set
    # What one writer rendered and another reuses, by name (the PNGs that report.html also embeds).
    rendered: dict[str, Any] = field(default_factory=dict)


Writer = Callable[[Analysed, Path], None]
_WRITERS: dict[Subject, dict[str, Writer]] = {"run": {}, "set": {}}


def register(name: str, *, of: Subject = "run") -> Callable[[Writer], Writer]:
    """Register a writer of format `name` for a single run (`of="run"`) or a repeat set (`of="set"`)."""

    def add(writer: Writer) -> Writer:
        if name in _WRITERS[of]:
            raise ValueError(f"output {name!r} ({of}) is already registered")
        _WRITERS[of][name] = writer
        return writer

    return add


def formats(of: Subject = "run") -> list[str]:
    """The registered format names, in the order they write."""
    return list(_WRITERS[of])


def write(analysed: Analysed, dest: Path, names: Iterable[str] | None = None, *, of: Subject = "run") -> None:
    """Write `analysed` into `dest` with the writers named (all registered ones when None)."""
    wanted = None if names is None else set(names)
    unknown = (wanted or set()) - set(_WRITERS[of])
    if unknown:
        raise ValueError(f"no output registered as {', '.join(sorted(unknown))} ({of}); known: {formats(of)}")
    for name, writer in _WRITERS[of].items():
        if wanted is None or name in wanted:
            writer(analysed, dest)
