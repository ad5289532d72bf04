"""`capacity gate --baseline NAME|FOLDER FOLDER`: is FOLDER not worse than the baseline beyond the margin?

Non-inferiority with the noise model of `capacity compare` (capacity_plugins/history/gate.py).
The baseline is a results folder or repeat set, or a name blessed with `capacity history bless
FOLDER --as NAME` (read from the catalog: `--history` or $CAPACITY_HISTORY — its results folder
need not exist any more). Exit 0 not worse; 3 worse beyond the margin (what, by how much, with the
interval); 2 the runs cannot decide (and how many repeats would) — or bad input, one line on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from capacity_plugins.analysis.compare import load_summary
from capacity_plugins.contracts.summary import AnySummary, summary_from_json
from capacity_plugins.errors import CommandParser, UserError
from capacity_plugins.history.catalog import Catalog, where_from
from capacity_plugins.history.gate import DEFAULT_MARGIN, judge


def _baseline(ref: str, history: str | None) -> tuple[AnySummary, str]:
    path = Path(ref)
    if path.exists():
        return load_summary(path), str(path)
    with Catalog(where_from(history)) as catalog:
        entry = catalog.find(ref)
        if entry is None or entry.id is None:
            raise UserError(f"--baseline {ref}: not a folder, and no such baseline or run in {catalog.name}")
        return summary_from_json(json.loads(catalog.summary_json(entry.id)), f"{catalog.name} run {entry.id}"), \
            f"{ref} (run {entry.id}: {entry.results_dir})"


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="capacity gate",
                      description="Exit 0 when FOLDER is not worse than the baseline beyond the margin, 3 when it is, "
                                  "2 when the runs cannot decide.")
    p.add_argument("folder", type=Path, metavar="FOLDER", help="the candidate: a results folder or repeat set")
    p.add_argument("--baseline", required=True, metavar="NAME|FOLDER",
                   help="a blessed baseline's name (capacity history bless), or a results folder / repeat set")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                   help="the loss, as a share of the baseline, that is not yet a regression")
    p.add_argument("--history", metavar="PATH|URL", help="the catalog of named baselines (default: $CAPACITY_HISTORY, else ./results/history.sqlite)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--out", type=Path, help="also write the judgement as JSON here")
    args = p.parse_args(argv)
    if not 0 <= args.margin < 1:
        raise UserError(f"--margin: expected a share in [0, 1), got {args.margin:g}")
    if not args.folder.exists():
        raise UserError(f"{args.folder}: no such results folder")
    baseline, name = _baseline(args.baseline, args.history)
    result = judge(baseline, load_summary(args.folder), args.margin, name, str(args.folder))
    if args.out:
        result.save(args.out)
    if args.format == "json":
        sys.stdout.write(result.dumps() + "\n")
    else:
        print(f"gate: {result.line}")
        print(f"baseline {result.baseline}; candidate {result.candidate}; margin {args.margin:.0%}; exit {result.exit_code}")
    return result.exit_code
