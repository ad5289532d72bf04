"""The plugin's part of Locust's web UI, through its documented extension points only.

- `template_args`: an "LLM" tab (`extended_tabs` + `extended_tables`; Locust's React app renders
  it as a table and shows tabs only once a test has started) and download links
  (`extended_csv_files`, under "Download Data").
- `after_request`: the tab's rows ride in `/stats/requests` as `extended_stats`, so they refresh
  with the rest of the UI (every 2 s) and follow "Reset stats".
- A Blueprint under `--web-base-path`, every route behind the UI's login when `--web-login` is on:
  `/llm/stats` (JSON: the same numbers unrounded, step, workers and lost workers — for scripts,
  and the fallback if the tab breaks: upstream bug #3240 is about extended tabs),
  `/llm/stats.csv` (written on request), `/llm/requests.jsonl`, `/llm/report.html` (after the
  run has been analysed), `/llm/answer` (the analysed test's plain answer, also the tab's first
  row and `/llm/stats` `answer`), `/llm/history` + `/llm/charts` (TTFT over time), `/llm/live` (what the
  tab's script draws) and `/llm/static/…` (that script and the bundled ECharts).
- `after_request` on Locust's index page: one `<script>` (static/llm-tab.js, relative to the page)
  that draws the tab's charts, per-step table, the answer forming and swarm health into the LLM
  tab's panel, above the stock table; if it fails, the stock table is still there.
- `/metrics` for Prometheus, deliberately *not* behind `--web-login` (a scraper cannot log in):
  bind the UI to a private address when the numbers must not be public.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from capacity_plugins.webui.live import TABLE_STRUCTURE, LiveView

log = logging.getLogger(__name__)

TAB_KEY = "llm"
CHUNK = 1 << 16
# The tab's script, put into Locust's index page (relative: it works under --web-base-path and
# behind a proxy that adds its own prefix). A failing script leaves the stock tab (a table) as is.
STATIC_FILES = {"llm-tab.js": "application/javascript", "echarts.min.js": "application/javascript"}
SCRIPT_TAG = b'<script src="./llm/static/llm-tab.js" defer></script>'


def base_path(environment: Any) -> str:
    opts = getattr(environment, "parsed_options", None)
    return (getattr(opts, "web_base_path", None) or "").rstrip("/")


def mount(web_ui: Any, live: LiveView, registry: Any, prefix: str = "") -> None:
    """Add the tab, downloads, JSON routes and /metrics to a Locust WebUI."""
    from flask import Blueprint, Response, jsonify, request

    from capacity_plugins.webui.exporter import flask_view

    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": TABLE_STRUCTURE}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llm/stats.csv", "title": "Download LLM stats CSV (TTFT/ITL/TPOT/E2E, now)"},
        {"href": "./llm/requests.jsonl", "title": "Download requests.jsonl (every request)"},
        {"href": "./llm/report.html", "title": "Analysis report (after the run)"},
        {"href": "./llm/charts", "title": "LLM charts: TTFT over time"},
        {"href": "./llm/stats", "title": "LLM stats JSON"},
    ]

    app = web_ui.app
    auth = web_ui.auth_required_if_enabled

    @app.after_request
    def _inject_llm_rows(response: Any) -> Any:
        # /stats/requests is memoized by Locust (2 s) and may hand back the same Response object:
        # the key is replaced, not appended, so repeated injection is harmless.
        if request.path.endswith("/stats/requests") and response.is_json and response.status_code == 200:
            try:
                body = response.get_json()
                rows = live.table_rows()
                extended = [e for e in body.get("extended_stats") or [] if e.get("key") != TAB_KEY]
                body["extended_stats"] = [*extended, {"key": TAB_KEY, "data": rows}]
                response.set_data(json.dumps(body))
            except Exception:  # the stock UI must keep working even if our rows fail
                log.exception("LLM tab rows failed")
        return response

    @app.after_request
    def _inject_llm_script(response: Any) -> Any:
        # Locust's index page (its React app) renders an extended tab only as a table: the script
        # draws the LLM tab's charts, step table and answer into that tab's panel.
        if request.endpoint == "locust.index" and response.status_code == 200 and response.mimetype == "text/html":
            try:
                body = response.get_data()
                if SCRIPT_TAG not in body and b"</body>" in body:
                    response.set_data(body.replace(b"</body>", SCRIPT_TAG + b"\n</body>", 1))
            except Exception:  # the stock UI must keep working
                log.exception("LLM tab script injection failed")
        return response

    bp = Blueprint("capacity_llm", __name__, url_prefix=prefix or None)

    @bp.route("/llm/live")
    @auth
    def llm_live() -> Any:
        # What the tab's script draws: per step, the answer forming, over time, swarm health.
        return jsonify(live.live())

    @bp.route("/llm/static/<name>")
    @auth
    def llm_static(name: str) -> Any:
        mimetype = STATIC_FILES.get(name)
        if mimetype is None:
            return Response("not found\n", status=404, mimetype="text/plain")
        data = resources.files("capacity_plugins.webui").joinpath("static", name).read_bytes()
        return Response(data, mimetype=mimetype, headers={"Cache-Control": "max-age=300"})

    @bp.route("/llm/stats")
    @auth
    def llm_stats() -> Any:
        return jsonify(live.snapshot())

    @bp.route("/llm/answer")
    @auth
    def llm_answer() -> Any:
        # After a test: its plain answer (the analysis's summary.json `answer`) and the report's link.
        return jsonify(live.answer() or {"answer": None, "pending": False})

    @bp.route("/llm/history")
    @auth
    def llm_history() -> Any:
        return jsonify({"bucket_s": live.history.bucket_s, "points": live.history.points(), "step": live.step()})

    @bp.route("/llm/stats.csv")
    @auth
    def llm_stats_csv() -> Any:
        with tempfile.TemporaryDirectory(prefix="capacity-llm-") as d:
            data = live.stats.write_csv(Path(d) / "llm_stats.csv").read_bytes()
        return Response(data, mimetype="text/csv",
                        headers={"Content-Disposition": "attachment; filename=llm_stats.csv"})

    @bp.route("/llm/requests.jsonl")
    @auth
    def llm_requests() -> Any:
        sink = live.records
        path = Path(getattr(sink, "path", None) or live.results_dir / "requests.jsonl")
        if not path.exists():
            return Response("no requests.jsonl yet (no request has finished)\n", status=404, mimetype="text/plain")
        size = _complete_size(path)
        return Response(_read_upto(path, size), mimetype="application/x-ndjson",
                        headers={"Content-Disposition": "attachment; filename=requests.jsonl",
                                 "Content-Length": str(size)})

    @bp.route("/llm/report.html")
    @auth
    def llm_report() -> Any:
        path = live.results_dir / "report.html"
        if not path.exists():
            return Response(
                f"No analysis report yet: it is written to {path.name} in the results folder after the run "
                "(`capacity run`, or a rehearsal stopped in the UI), or by `capacity analyze FOLDER`.\n",
                status=404, mimetype="text/plain")
        return Response(path.read_bytes(), mimetype="text/html")

    @bp.route("/llm/charts")
    @auth
    def llm_charts() -> Any:
        page = resources.files("capacity_plugins.webui").joinpath("charts.html").read_text(encoding="utf-8")
        return Response(page, mimetype="text/html")

    app.register_blueprint(bp)

    # Prometheus: open even with --web-login (see module docstring). Under the base path like the
    # rest of the UI, and at /metrics too so a default scrape config finds it.
    view = flask_view(registry)
    app.add_url_rule(f"{prefix}/metrics", "capacity_metrics", view)
    if prefix:
        app.add_url_rule("/metrics", "capacity_metrics_root", view)


def _complete_size(path: Path) -> int:
    """Size of the file up to its last newline: the writer may be mid-line right now."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb") as f:
        pos = size
        while pos > 0:
            start = max(0, pos - CHUNK)
            f.seek(start)
            block = f.read(pos - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                return start + nl + 1
            pos = start
    return 0


def _read_upto(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        left = size
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
