"""matrix.json, matrix.md and matrix.html: the rows, the ranking and the best configuration.

matrix.json's keys are listed in docs/matrix.md. The HTML page is self-contained (no script, no
remote asset): the table, the best configuration's statement and each entry's score interval
drawn as a bar, with links to each entry's own report.html.
"""

from __future__ import annotations

import html
import os
import time
from pathlib import Path
from typing import Any

from capacity_plugins.analysis.pareto import mark_frontier
from capacity_plugins.contracts.pareto import ParetoPoint
from capacity_plugins.matrix.entry import Outcome
from capacity_plugins.matrix.spec import Matrix
from capacity_plugins.matrix.table import fmt, rank, row_from_summary

SCHEMA_VERSION = 1


def _rel(path: Path | None, root: Path) -> str | None:
    return None if path is None else os.path.relpath(path, root)


def build(matrix: Matrix, slo: dict[str, Any], outcomes: list[Outcome], root: Path, started: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for o in outcomes:
        row: dict[str, Any] = {
            "name": o.entry.name, "status": o.status, "stage": o.stage, "reason": o.reason, "url": o.url,
            "command": o.entry.command, "gpus": o.gpus, "gpu_hour_usd": o.gpu_hour_usd,
            "folder": _rel(o.folder, root), "run_dir": _rel(o.run_dir, root),
            "report": _rel(o.run_dir / "report.html", root) if o.run_dir and (o.run_dir / "report.html").exists() else None,
            "teardown_problem": o.teardown, "timings_s": {k: round(v, 2) for k, v in o.timings_s.items()},
            "score": None, "score_ci": None, "rank": None,
        }
        if o.summary is not None:
            row.update(row_from_summary(o.summary))
            row["warnings"] = list(o.summary.warnings)
        rows.append(row)
    best = rank(rows)
    failed = [r["name"] for r in rows if r["status"] != "ok"]
    return {
        "schema_version": SCHEMA_VERSION, "name": matrix.name, "description": matrix.description,
        "matrix_file": str(matrix.path), "scenario": str(matrix.scenario), "slo": slo,
        "started_unix": started, "duration_s": round(time.time() - started, 1),
        "best": best, "entries": rows, "failed": failed,
        "complete": not failed, "pareto": pareto_across(outcomes),
    }


def pareto_across(outcomes: list[Outcome]) -> dict[str, Any]:
    """Every entry's Pareto points on one plane (tokens/s per GPU: each entry over its own GPUs), the
    frontier taken over all of them: which configuration gives the most per GPU at each interactivity."""
    series: dict[str, list[ParetoPoint]] = {}
    bound = None
    for o in outcomes:
        found = getattr(o.summary, "pareto", None) if o.summary is not None else None
        if found is not None:
            series[o.entry.name] = [p.model_copy() for p in found.points]
            bound = bound if bound is not None else found.slo_per_user_tok_s
    mark_frontier([p for points in series.values() for p in points])
    return {"slo_per_user_tok_s": bound,
            "entries": {name: [p.model_dump(mode="json") for p in points] for name, points in series.items()}}


def _pareto_lines(doc: dict[str, Any]) -> list[str]:
    front = sorted(((name, p) for name, points in (doc.get("pareto") or {}).get("entries", {}).items()
                    for p in points if p["frontier"]), key=lambda x: x[1]["per_gpu_tok_s"])
    if not front:
        return []
    return ["", "Pareto frontier across the entries (output tok/s per GPU, per user at TPOT P95; the plot is in "
            "matrix.html): " + "; ".join(f"{name} at {p['level']:g}: {_n(p['per_gpu_tok_s'])} / {_n(p['per_user_tok_s'])}"
                                         + ("" if p["slo_pass"] else " (misses the SLO)") for name, p in front)]


def _pareto_html(doc: dict[str, Any]) -> str:
    pareto = doc.get("pareto") or {}
    series = {name: [ParetoPoint.model_validate(p) for p in points] for name, points in pareto.get("entries", {}).items()}
    if not any(series.values()):
        return ""
    import base64

    from capacity_plugins.outputs.pareto_text import pareto_png  # matplotlib: only when there is a plot

    data = pareto_png(series, pareto.get("slo_per_user_tok_s"), "each entry over its own GPUs")
    return ('<h2>Pareto: interactivity against throughput, every entry</h2><figure><img alt="output tokens/s per '
            f'user against per GPU, every entry" src="data:image/png;base64,{base64.b64encode(data).decode()}"/></figure>')


# -- text ---------------------------------------------------------------------------------------------------


def _n(v: Any, digits: str = ".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, int | float) and not isinstance(v, bool):
        return fmt(float(v)) if digits == ".3g" else format(v, digits)
    return str(v)


def _ci(ci: list[Any] | None) -> str:
    return "" if not ci else f" [{_n(ci[0])}, {_n(ci[1]) if ci[1] is not None else '∞'}]"


def _knee(r: dict[str, Any]) -> str:
    if r.get("knee") is None:
        return "none seen" if r["status"] == "ok" else "–"
    return f"{_n(r['knee'])} {r.get('knee_unit') or ''}".strip() + _ci(r.get("knee_interval"))


def _cells(r: dict[str, Any], basis: str) -> list[str]:
    if r["status"] != "ok":
        return [r["name"], "–", r["status"], "–", "–", "–", "–", "–", "–", f"{r['stage']}: {r['reason']}"]
    cap = _n(r["capacity_rps"]) + ("+" if r["capacity_is_lower_bound"] else "") + _ci(r["capacity_ci_rps"])
    slo_load = "–" if r.get("slo_load_level") is None else _n(r["slo_load_level"])
    return [r["name"], _n(r["rank"]), cap, _knee(r), slo_load, _n(r.get("ttft_p95_ms")) + _ci(r.get("ttft_p95_ci_ms")),
            _n(r.get("tpot_p95_ms")) + _ci(r.get("tpot_p95_ci_ms")),
            _n(r.get("cost_per_1m_output_tokens_usd"), ".4g"),
            f"{_n(r['score'])}{_ci(r.get('score_ci'))}", f"{r['gpus']} GPU × {_n(r['gpu_hour_usd'])} USD/h"
            + (f"; teardown: {r['teardown_problem']}" if r.get("teardown_problem") else "")]


def headers(basis: str) -> list[str]:
    return ["entry", "rank", "capacity rps [interval]", "knee", "SLO load", "TTFT P95 ms", "TPOT P95 ms",
            "USD / 1M output tokens", f"{basis} [interval]", "notes"]


def markdown(doc: dict[str, Any]) -> str:
    best = doc["best"]
    lines = [f"# Configuration matrix: {doc['name']}", "",
             f"Scenario `{doc['scenario']}`; SLO {_slo_text(doc['slo'])}. Capacity is per node under the SLO "
             "(rps, with its interval; `+`: a lower bound); TTFT / TPOT P95 at the SLO load (the highest level "
             f"that passed); ranked by {best['basis']}.", "",
             f"**Best: {best['statement']}**", ""]
    lines += [f"- {w}" for w in best["warnings"]] + ([""] if best["warnings"] else [])
    cols = headers(best["basis"])
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in _ordered(doc["entries"]):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(r, best["basis"])) + " |")
    lines += _pareto_lines(doc)
    if doc["failed"]:
        lines += ["", f"Failed: {', '.join(doc['failed'])} (the exit code is 1)."]
    return "\n".join(lines) + "\n"


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["rank"] is None, r["rank"] or 0))


def _slo_text(slo: dict[str, Any]) -> str:
    parts = [f"{k.removesuffix('_ms').replace('_', ' ').upper()} ≤ {_n(v)} ms" for k, v in slo.items()
             if k.endswith("_ms") and v is not None]
    return ", ".join(parts) or "none (capacity = utilisation cap × best throughput)"


# -- HTML ---------------------------------------------------------------------------------------------------


def _bars(rows: list[dict[str, Any]], basis: str) -> str:
    """An inline SVG: each ranked entry's score as a dot on its interval."""
    ranked = [r for r in _ordered(rows) if r.get("score") is not None]
    if not ranked:
        return ""
    tops = [r["score"] for r in ranked] + [x for r in ranked for x in (r.get("score_ci") or []) if x is not None]
    top = max(tops) * 1.1 or 1.0
    w, left, h = 640, 160, 26
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + left + 20}" height="{h * len(ranked) + 30}" '
           f'role="img" aria-label="{html.escape(basis)} per entry">']
    for i, r in enumerate(ranked):
        y = 15 + i * h
        x = left + w * r["score"] / top
        ci = r.get("score_ci") or [r["score"], r["score"]]
        lo = left + w * (ci[0] if ci[0] is not None else r["score"]) / top
        hi = left + w * (ci[1] / top if ci[1] is not None else 1.0)
        out.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" font-size="12">{html.escape(r["name"])}</text>')
        out.append(f'<line x1="{lo:.1f}" y1="{y}" x2="{hi:.1f}" y2="{y}" stroke="#888" stroke-width="6"/>')
        out.append(f'<circle cx="{x:.1f}" cy="{y}" r="5" fill="{"#1a7f37" if r["rank"] == 1 else "#333"}"/>')
        out.append(f'<text x="{x + 8:.1f}" y="{y - 6}" font-size="11">{_n(r["score"])}</text>')
    out.append(f'<text x="{left}" y="{h * len(ranked) + 25}" font-size="11">{html.escape(basis)}: '
               'dot = measured, bar = interval (to the edge: no upper end)</text></svg>')
    return "".join(out)


def to_html(doc: dict[str, Any]) -> str:
    best = doc["best"]
    cols = headers(best["basis"])
    body = []
    for r in _ordered(doc["entries"]):
        cells = [html.escape(c) for c in _cells(r, best["basis"])]
        if r.get("report"):
            cells[0] = f'<a href="{html.escape(r["report"])}">{cells[0]}</a>'
        cls = ' class="failed"' if r["status"] != "ok" else (' class="best"' if r["name"] == best["name"] else "")
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    warn = "".join(f"<li>{html.escape(w)}</li>" for w in best["warnings"])
    failed = (f"<p>Failed: {html.escape(', '.join(doc['failed']))} (the exit code is 1).</p>" if doc["failed"] else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Configuration matrix: {html.escape(doc['name'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; font-size: 13px; }}
th {{ background: #f3f3f3; }}
tr.best td {{ background: #e8f5e9; }}
tr.failed td {{ background: #fdecea; }}
.statement {{ font-size: 15px; font-weight: 600; }}
</style></head><body>
<h1>Configuration matrix: {html.escape(doc['name'])}</h1>
<p>Scenario <code>{html.escape(doc['scenario'])}</code>; SLO {html.escape(_slo_text(doc['slo']))}.
Capacity is per node under the SLO (rps, with its interval; <code>+</code>: a lower bound); TTFT / TPOT P95 at the
SLO load (the highest level that passed); ranked by {html.escape(best['basis'])}.</p>
<p class="statement">Best: {html.escape(best['statement'])}</p>
{f'<ul>{warn}</ul>' if warn else ''}
<table><thead><tr>{''.join(f'<th>{html.escape(c)}</th>' for c in cols)}</tr></thead>
<tbody>{''.join(body)}</tbody></table>
{failed}
{_bars(doc['entries'], best['basis'])}
{_pareto_html(doc)}
</body></html>
"""


def write(doc: dict[str, Any], root: Path) -> None:
    from capacity_plugins.contracts.document import dumps_json  # inf → null: strict JSON

    root.mkdir(parents=True, exist_ok=True)
    (root / "matrix.json").write_text(dumps_json(doc), encoding="utf-8")
    (root / "matrix.md").write_text(markdown(doc), encoding="utf-8")
    (root / "matrix.html").write_text(to_html(doc), encoding="utf-8")
