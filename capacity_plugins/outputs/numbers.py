"""Numbers in words, the way every report writes them: a value with its interval rounded to the
interval's precision, a load level as a reader says it, ∞ and ? for ends the data cannot bound.
Shared by summary.md, report.html, the console and the repeat set's page."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

JUDGED_MARK = {"pass": "✓", "fail": "✗", "uncertain": "?"}


def fmt(v: Any, digits: int = 1, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            return "∞"
        return f"{v:,.{digits}f}{unit}"
    return str(v)


def fmt_ci(ci: Sequence[float | None] | None, digits: int = 1) -> str:
    """(lo–hi); an end the data cannot support is ∞ (upper) or ? (lower)."""
    if not ci:
        return ""
    lo = "?" if ci[0] is None else f"{ci[0]:,.{digits}f}"
    hi = "∞" if ci[1] is None or not math.isfinite(ci[1]) else f"{ci[1]:,.{digits}f}"
    return f"({lo}–{hi})"


def fmt_num(v: Any, sig: int = 3, unit: str = "") -> str:
    """A number to `sig` significant digits, never in exponent form: 8.51, 10.9, 2,825, 0.0816.
    Whole digits are never dropped (12 345, not 12 300): they are no false precision a reader trips on."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return fmt(v)
    if not math.isfinite(v):
        return "∞"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}{unit}"
    d = max(sig - 1 - math.floor(math.log10(abs(v))), 0)
    return f"{v:,.{d}f}{unit}"


def fmt_level(v: Any) -> str:
    """A load level as a reader says it: 8, 16, 0.5, 10.9 (a trace window's 10.9333 req/s), 1,250."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return fmt(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    d = max(2 - math.floor(math.log10(abs(v))), 0)
    text = f"{v:,.{d}f}"
    return text.rstrip("0").rstrip(".") if d else text


def interval_decimals(v: float, ci: Sequence[float | None] | None) -> int | None:
    """How many decimals the interval supports: two significant digits of its width (of the distance
    to its one finite end when the other is unbounded); None when it says nothing (no or zero width)."""
    if not ci:
        return None
    ends = [x for x in ci if x is not None and math.isfinite(x)]
    width = (ends[1] - ends[0]) if len(ends) == 2 else (abs(v - ends[0]) if ends else 0.0)
    if not width > 0:
        return None
    return min(max(1 - math.floor(math.log10(width)), 0), 4)


def fmt_iv(v: Any, ci: Sequence[float | None] | None = None, unit: str = "", sig: int = 3) -> str:
    """A value with its interval, both rounded to the interval's precision: "8.4 [7.6–9.2]",
    "1,176 [1,149–1,251]", "9.53 [9.47–9.61]". An end the data cannot bound is ∞ (upper) or ? (lower);
    without an interval the value alone to `sig` significant digits."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return fmt(v)
    d = interval_decimals(v, ci)
    if d is not None and v != 0:  # never more than `sig` significant digits: 9.54 [9.53–9.56], not 9.540
        d = min(d, max(sig - 1 - math.floor(math.log10(abs(v))), 0))
    if d is None:
        return fmt_num(v, sig, unit) + (f" {_bracket(ci, None)}" if ci and v is not None else "")
    return f"{v:,.{d}f}{unit} {_bracket(ci, d)}"


def _bracket(ci: Sequence[float | None] | None, d: int | None) -> str:
    if not ci:
        return ""

    def end(x: float | None, missing: str) -> str:
        if x is None or not math.isfinite(x):
            return missing
        return f"{x:,.{d}f}" if d is not None else fmt_num(x)

    return f"[{end(ci[0], '?')}–{end(ci[1], '∞')}]"
