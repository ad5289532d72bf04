"""What `capacity compare A B --format json` (and `--out`) writes: the before/after table, each row
judged against the noise (analysis/compare.py computes it, outputs/compare.py prints it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from capacity_plugins.contracts.document import Section

Verdict = Literal["better", "worse", "within noise", "unknown", "info"]
Overall = Literal["improved", "regressed", "within noise"]


class CompareRow(Section):
    """One compared figure."""

    metric: str = ""
    before: float | None = None
    after: float | None = None
    change: float | None = None
    """Relative: after / before − 1."""
    change_ci: list[float] | None = None
    """The relative change's interval (the difference ± the noise it had to beat, over the before
    value), for a row better or worse; else null."""
    noise: float | None = None
    """What the difference had to exceed (null: unknown)."""
    verdict: Verdict = "unknown"


class Moved(Section):
    """A row judged better or worse beyond its noise."""

    metric: str = ""
    verdict: Verdict = "unknown"
    change: float | None = None
    change_ci: list[float] | None = None
    text: str = ""
    """`capacity +23 % [+12, +35] better`."""


class NoiseBasis(Section):
    before: str = ""
    """`repeats` or `within-run + min detectable difference`."""
    after: str = ""
    min_detectable_difference: float = 0.0


class Comparison(Section):
    """The before/after comparison of two runs or repeat sets."""

    compared_level: float | None = None
    """Null when no common level is below saturation."""
    compared_where: str = ""
    rows: list[CompareRow] = Field(default_factory=list)
    overall: Overall = "within noise"
    moved: list[Moved] = Field(default_factory=list)
    """Every row better or worse, worse first."""
    bottom_line: str = ""
    """The `Overall:` line: what moved, or `within noise`."""
    advice: list[str] = Field(default_factory=list)
    noise_basis: NoiseBasis = Field(default_factory=NoiseBasis)
    before: str | None = None
    """The results folder of the earlier run."""
    after: str | None = None
    """The results folder of the later run."""

    def row(self, metric: str) -> CompareRow:
        """The row of one compared figure (by its label)."""
        return next(r for r in self.rows if r.metric == metric)
