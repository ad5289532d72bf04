"""`capacity compare RUN_A RUN_B`: the before/after table of docs/capacity.md, with a verdict per row.

The before/after review (docs/capacity.md): average QPS, P99, P50, GPU util, cost per 1k requests, cache hit rate — "if QPS
rose and cost fell, resources are used better; if QPS did not rise and GPU util fell, the
bottleneck is elsewhere: roll back". Each run is read from its summary.json (analysed first when
missing). Latencies are compared at the highest load level both runs measured validly, so a run
that simply went further up the sweep is not punished for its extra levels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from capacity_plugins.errors import CommandParser, UserError

SAME_BAND = 0.05  # changes within ±5 % read as "unchanged"


def load_summary(path: Path, progress=None) -> dict[str, Any]:
    path = Path(path)
    f = path / "summary.json" if path.is_dir() else path
    if not f.exists():
        if path.is_dir() and (path / "requests.jsonl").exists():
            from capacity_plugins.analysis.pipeline import analyze

            return analyze(path, progress=progress, report=False)
        raise UserError(f"{path}: no summary.json and no requests.jsonl (not a results folder)")
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{f}: invalid JSON ({e})") from None
    if not isinstance(doc, dict) or "steps" not in doc or "capacity" not in doc:
        raise UserError(f"{f}: not a capacity summary (no steps / capacity keys)")
    return doc


def _row_at(summary: dict[str, Any], level: float | None) -> dict[str, Any] | None:
    valid = [r for r in summary["steps"] if r.get("valid")]
    if not valid:
        return None
    if level is not None:
        for r in valid:
            if r["level"] == level:
                return r
    return max(valid, key=lambda r: r["level"])


def _judge(before: float | None, after: float | None, higher_is_better: bool | None) -> str:
    if before is None or after is None:
        return "unknown"
    if higher_is_better is None:
        return "info"
    if before == 0:
        return "unchanged" if after == 0 else ("better" if (after > 0) == higher_is_better else "worse")
    change = after / before - 1
    if abs(change) <= SAME_BAND:
        return "unchanged"
    return "better" if (change > 0) == higher_is_better else "worse"


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    la = {r["level"] for r in a["steps"] if r.get("valid")}
    lb = {r["level"] for r in b["steps"] if r.get("valid")}
    common = max(la & lb) if la & lb else None
    ra, rb = _row_at(a, common), _row_at(b, common)

    def g(r: dict[str, Any] | None, k: str) -> float | None:
        return None if r is None else r.get(k)

    def cache(s: dict[str, Any]) -> float | None:
        m = s.get("meta") or {}
        return m.get("prefix_cache_hit_rate") or m.get("cache_hit_rate")

    spec = [
        ("capacity per node under SLO (rps)", a["capacity"].get("per_node_rps"), b["capacity"].get("per_node_rps"), True),
        ("max throughput (rps)", max((r.get("rps") or 0 for r in a["steps"] if r.get("valid")), default=None),
         max((r.get("rps") or 0 for r in b["steps"] if r.get("valid")), default=None), True),
        ("QPS at compared level", g(ra, "rps"), g(rb, "rps"), True),
        ("E2E P50 ms", g(ra, "e2e_p50_ms"), g(rb, "e2e_p50_ms"), False),
        ("E2E P99 ms", g(ra, "e2e_p99_ms"), g(rb, "e2e_p99_ms"), False),
        ("TTFT P95 ms", g(ra, "ttft_p95_ms"), g(rb, "ttft_p95_ms"), False),
        ("GPU util %", g(ra, "gpu_util_pct"), g(rb, "gpu_util_pct"), None),
        ("cost per 1k requests USD", a["cost"].get("per_1k_requests_usd"), b["cost"].get("per_1k_requests_usd"), False),
        ("cache hit rate", cache(a), cache(b), True),
    ]
    rows = [{"metric": m, "before": x, "after": y, "change": (y / x - 1) if x and y is not None else None,
             "verdict": _judge(x, y, hib)} for m, x, y, hib in spec]
    qps = rows[2] if rows[2]["verdict"] != "unknown" else rows[1]
    gpu = rows[6]
    overall = "improved" if qps["verdict"] == "better" and not any(r["verdict"] == "worse" for r in rows[3:6]) else (
        "regressed" if qps["verdict"] == "worse" or any(r["verdict"] == "worse" for r in rows[3:6]) else "unchanged")
    advice = []
    if qps["verdict"] in ("unchanged", "worse") and gpu["before"] is not None and gpu["after"] is not None and gpu["after"] < gpu["before"]:
        advice.append("QPS did not rise while GPU util fell: the bottleneck is not GPU capacity — roll back and profile")
    cost_row = rows[7]
    if qps["verdict"] == "better" and cost_row["verdict"] == "better":
        advice.append("QPS up and cost per request down: resources are used better")
    return {"compared_level": common, "rows": rows, "overall": overall, "advice": advice,
            "before": a.get("meta", {}).get("results_dir"), "after": b.get("meta", {}).get("results_dir")}


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown(c: dict[str, Any]) -> str:
    lines = [f"Compared at level {c['compared_level']:g}" if c["compared_level"] is not None else "No common level: highest levels compared",
             "", "| metric | before | after | change | verdict |", "|---|---|---|---|---|"]
    for r in c["rows"]:
        ch = "–" if r["change"] is None else f"{r['change']:+.0%}"
        lines.append(f"| {r['metric']} | {_fmt(r['before'])} | {_fmt(r['after'])} | {ch} | {r['verdict']} |")
    lines += ["", f"Overall: {c['overall']}"] + [f"- {a}" for a in c["advice"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="capacity compare", description="Before/after table of two analysed runs.")
    p.add_argument("before", type=Path, help="results folder (or summary.json) of the earlier run")
    p.add_argument("after", type=Path, help="results folder (or summary.json) of the later run")
    p.add_argument("--format", choices=("md", "json"), default="md")
    p.add_argument("--out", type=Path, help="also write the comparison as JSON here")
    args = p.parse_args(argv)
    c = compare(load_summary(args.before), load_summary(args.after))
    if args.out:
        args.out.write_text(json.dumps(c, indent=2), encoding="utf-8")
    sys.stdout.write(json.dumps(c, indent=2) + "\n" if args.format == "json" else markdown(c))
    return 0
