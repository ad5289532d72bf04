"""`capacity compare A B`: the before/after table of two analysed runs or repeat sets (analysis/compare.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from capacity_plugins.analysis.compare import compare, load_summary
from capacity_plugins.errors import CommandParser, UserError
from capacity_plugins.outputs.compare import markdown


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when compared (whatever the outcome), 2 for bad input or a side without valid steps."""
    p = CommandParser(prog="capacity compare", description="Before/after table of two analysed runs or repeat sets.")
    p.add_argument("before", type=Path, help="results folder, repeat set (or summary.json) of the earlier run")
    p.add_argument("after", type=Path, help="results folder, repeat set (or summary.json) of the later run")
    p.add_argument("--format", choices=("md", "json"), default="md")
    p.add_argument("--out", type=Path, help="also write the comparison as JSON here")
    p.add_argument("--min-detectable-difference", type=float,
                   help="smallest relative change single runs can show (default: the before run's verdict setting, 0.10)")
    args = p.parse_args(argv)
    if args.min_detectable_difference is not None and not 0 <= args.min_detectable_difference < 1:
        raise UserError("--min-detectable-difference: expected a share in [0, 1)")
    c = compare(load_summary(args.before), load_summary(args.after), args.min_detectable_difference)
    if args.out:
        c.save(args.out)  # inf noise → null: strict JSON
    sys.stdout.write(c.dumps() + "\n" if args.format == "json" else markdown(c))
    return 0
