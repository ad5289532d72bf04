"""`capacity history`: the run catalog (capacity_plugins/history/) — record, list, show, trend, bless.

    capacity history add RESULTS... [--label build=42]     # import analysed (or not yet analysed) folders
    capacity history list [--scenario S] [--target URL] [--label build=42]
    capacity history show ID|FOLDER|BASELINE
    capacity history trend [--scenario S] [--by build] --out DIR    # trend.png + trend.html
    capacity history bless ID|FOLDER --as NAME                      # a baseline for `capacity gate`

The catalog: `--history PATH|postgresql://...` or $CAPACITY_HISTORY (docs/history.md). Exit 0 done;
2 bad input or a catalog that cannot be opened or written (one line naming it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from capacity_plugins.contracts.history import RunEntry
from capacity_plugins.errors import CommandParser, UserError
from capacity_plugins.history.catalog import Catalog, where_from
from capacity_plugins.history.record import parse_labels, record_folder


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity history", description="The catalog of analysed runs: record, list, trend, bless.")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = CommandParser(add_help=False)
    common.add_argument("--history", metavar="PATH|URL", help="the catalog (default: $CAPACITY_HISTORY, else ./results/history.sqlite)")
    filters = CommandParser(add_help=False)
    filters.add_argument("--scenario", help="only runs of this scenario")
    filters.add_argument("--target", help="only runs against this target URL")
    filters.add_argument("--label", action="append", metavar="KEY=VALUE", help="only runs with this label; repeatable")
    a = sub.add_parser("add", parents=[common], help="record results folders or repeat sets")
    a.add_argument("folders", nargs="+", type=Path, metavar="FOLDER")
    a.add_argument("--label", action="append", metavar="KEY=VALUE", help="label the recorded runs; repeatable")
    ls = sub.add_parser("list", parents=[common, filters], help="recorded runs, oldest first")
    ls.add_argument("--format", choices=("text", "json"), default="text")
    ls.add_argument("--all", action="store_true", help="also the repeats inside recorded sets")
    sh = sub.add_parser("show", parents=[common], help="one recorded run with its steps")
    sh.add_argument("ref", metavar="ID|FOLDER|BASELINE")
    sh.add_argument("--format", choices=("text", "json"), default="text")
    t = sub.add_parser("trend", parents=[common, filters], help="capacity and SLO latencies over runs: PNG + HTML")
    t.add_argument("--by", default="build", help="the label that colours the runs")
    t.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for trend.png and trend.html")
    t.add_argument("--all", action="store_true", help="also the repeats inside recorded sets")
    b = sub.add_parser("bless", parents=[common], help="name a run or set as a baseline for `capacity gate`")
    b.add_argument("ref", metavar="ID|FOLDER")
    b.add_argument("--as", dest="name", required=True, metavar="NAME")
    return p


LIST_HEADERS = ("id", "kind", "scenario", "labels", "capacity per node", "verdict", "results")


def _cells(r: RunEntry) -> tuple[str, ...]:
    ci = f" [{r.capacity_lo:.3g}, {r.capacity_hi:.3g}]" if r.capacity_lo is not None and r.capacity_hi is not None else ""
    cap = f"{r.capacity_rps:.3g} rps{ci}" if r.capacity_rps is not None else "capacity unknown"
    labels = ",".join(f"{k}={v}" for k, v in r.labels.items()) or "-"
    kind = f"set of {r.repeats}" if r.kind == "repeat_set" else "run" if r.parent_id is None else f"repeat of {r.parent_id}"
    return str(r.id), kind, r.scenario or "-", labels, cap, r.verdict or "-", r.results_dir or "-"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Columns as wide as their widest cell (labels can be long: a matrix entry's are two)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i == 0 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
            .rstrip() for row in rows]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with Catalog(where_from(args.history)) as catalog:
        return ACTIONS[args.action](catalog, args)


def _add(catalog: Catalog, args: argparse.Namespace) -> int:
    labels = parse_labels(args.label)
    for folder in args.folders:
        entries = record_folder(catalog, folder, labels)
        extra = f" (+{len(entries) - 1} repeats)" if len(entries) > 1 else ""
        print(f"recorded {folder} as run {entries[0].id}{extra} in {catalog.name}")
    return 0


def _list(catalog: Catalog, args: argparse.Namespace) -> int:
    runs = catalog.runs(args.scenario, args.target, parse_labels(args.label), top_level=not args.all)
    if args.format == "json":
        print(json.dumps([r.model_dump(mode="json", exclude={"steps"}) for r in runs], indent=2))
        return 0
    for line in _table([LIST_HEADERS, *(_cells(r) for r in runs)]):
        print(line)
    print(f"{len(runs)} runs in {catalog.name}")
    return 0


def _show(catalog: Catalog, args: argparse.Namespace) -> int:
    r = catalog.find(args.ref)
    if r is None:
        raise UserError(f"{args.ref}: no such run, folder or baseline in {catalog.name}")
    if args.format == "json":
        print(r.dumps())
        return 0
    for line in _table([LIST_HEADERS, _cells(r)]):
        print(line)
    print(f"engine {r.engine or '-'} {r.engine_version or ''}  model {r.model or '-'}  target {r.target or '-'}")
    print(f"knee {r.knee if r.knee is not None else '-'} {r.knee_unit or ''}  SLO {r.slo}  limiting {r.limiting_slo or '-'}")
    print(f"{'level':>8} {'rps':>8} {'interval':>18} {'TTFT P95':>9} {'E2E P99':>9} {'SLO':>5} valid")
    for s in r.steps:
        ci = f"[{s.rps_lo:.3g}, {s.rps_hi:.3g}]" if s.rps_lo is not None and s.rps_hi is not None else "-"
        print(f"{s.level:>8g} {_n(s.rps):>8} {ci:>18} {_n(s.ttft_p95_ms):>9} {_n(s.e2e_p99_ms):>9} "
              f"{'pass' if s.slo_pass else 'fail':>5} {'yes' if s.valid else 'no'}")
    return 0


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _trend(catalog: Catalog, args: argparse.Namespace) -> int:
    from capacity_plugins.outputs.history_trend import trend_html, trend_png

    runs = catalog.runs(args.scenario, args.target, parse_labels(args.label), top_level=not args.all)
    if not runs:
        raise UserError(f"no recorded run matches in {catalog.name}")
    args.out.mkdir(parents=True, exist_ok=True)
    image = trend_png(runs, args.by)
    (args.out / "trend.png").write_bytes(image)
    title = f"Capacity over runs: {args.scenario or 'every scenario'}"
    (args.out / "trend.html").write_text(trend_html(runs, args.by, image, title), encoding="utf-8")
    print(f"trend of {len(runs)} runs: {args.out / 'trend.png'}, {args.out / 'trend.html'}")
    return 0


def _bless(catalog: Catalog, args: argparse.Namespace) -> int:
    r = catalog.find(args.ref)
    if r is None:
        path = Path(args.ref)
        if not path.is_dir():
            raise UserError(f"{args.ref}: no such run in {catalog.name}, and not a results folder")
        r = record_folder(catalog, path)[0]
    catalog.bless(args.name, int(r.id or 0))
    print(f"baseline {args.name!r} = run {r.id} ({r.results_dir})")
    return 0


ACTIONS = {"add": _add, "list": _list, "show": _show, "trend": _trend, "bless": _bless}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
