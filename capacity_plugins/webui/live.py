"""What the live view shows, computed at request time from the run's own objects.

One `LiveView` per writing process (local runner or master; a worker has no complete view). It
owns nothing the measurement core owns: LLM numbers come from `ctx.llm_stats` (merged, unrounded),
the current step from the rehearsal's shape (`environment.shape_class.current`), telemetry from the
rehearsal's collector when one runs. Besides reading, it keeps two small things of its own:

- the master's `SwarmMembership` (swarm/membership.py): which workers went missing, so a worker
  that died stays visible as lost in the UI, /llm/stats and meta.json (`workers_lost`).
- `History`: TTFT/E2E per time bucket from every finished record, for the charts page (the
  cumulative LLMStats percentiles cannot show how latency moved during the run).

After a test, the plain answer: the analysis runs in a child process when the test stops
(rehearsal/results.py) and writes summary.json into the results folder; `answer()` reads its `answer`
from there (once per new file), so the tab's first row and `/llm/stats` / `/llm/answer` say the same
sentence as the report and the terminal.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capacity_plugins.swarm.membership import SwarmMembership
from capacity_plugins.webui.history import History

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0


# -- telemetry ------------------------------------------------------------------------------------


def find_telemetry(environment: Any) -> Any | None:
    """The run's TelemetryCollector (`ctx.telemetry`, set by the rehearsal wiring), or None."""
    found = getattr(getattr(environment, "capacity", None), "telemetry", None)
    return found if found is not None and hasattr(found, "latest") else None


def telemetry_summary(latest: dict[str, Any]) -> dict[str, float | None]:
    """One number per column of the tab, across every host/device that reported it.

    GPU util: mean over GPUs; VRAM: sum (bytes); server queue / running: sum over servers;
    KV cache: the fullest server (the one that will start preempting first).
    """
    values: dict[str, list[float]] = {}
    for devices in (latest or {}).values():
        for series in devices.values():
            for name, reading in series.items():
                v = reading.get("value") if isinstance(reading, dict) else reading
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    values.setdefault(name, []).append(float(v))

    def agg(name: str, how: Callable[[list[float]], float]) -> float | None:
        vs = values.get(name)
        return how(vs) if vs else None

    return {
        "gpu_util_pct": agg("gpu_util_pct", lambda vs: sum(vs) / len(vs)),
        "vram_used_bytes": agg("vram_used_bytes", sum),
        "vram_total_bytes": agg("vram_total_bytes", sum),
        "server_waiting": agg("server_waiting", sum),
        "server_running": agg("server_running", sum),
        "kv_cache_usage": agg("kv_cache_usage", max),
    }


# -- workers ----------------------------------------------------------------------------------------


# The master's swarm membership lives on the load side (its steps' validity depends on it); the
# live view only shows it. The old name stays for code that built one directly.
WorkerWatch = SwarmMembership


# -- the view ---------------------------------------------------------------------------------------


class LiveView:
    """Everything the tab, /llm/stats, the downloads and /metrics read (local or master)."""

    def __init__(self, environment: Any, ctx: Any) -> None:
        self.env = environment
        self.ctx = ctx
        self.history = History()
        self.workers: SwarmMembership | None = None
        self.registry: Any = None  # the Prometheus registry /metrics serves (set by webui.attach)
        self.exporter: Any = None  # the --exporter-port server, when asked for
        if ctx.role == "master":
            self.workers = ctx.membership or SwarmMembership(environment.runner)
        self._answer_cache: tuple[Any, dict[str, Any] | None] = (None, None)

    def attach(self) -> None:
        events = self.env.capacity_events
        events.record.add_listener(lambda record, **_: self.history.add(record))
        events.worker_lost.add_listener(self._on_lost)
        self.env.events.reset_stats.add_listener(self._on_reset)
        self.env.events.quitting.add_listener(self._on_quitting)
        if self.workers is not None:
            self.workers.start()

    def _on_reset(self, **_: Any) -> None:
        self.history.reset()

    def _on_lost(self, lost: list[dict[str, Any]], **_: Any) -> None:
        # meta.json merges extra_meta when it is written (at quitting): lost workers are in it.
        self.ctx.extra_meta["workers_lost"] = lost

    def _on_quitting(self, **_: Any) -> None:
        if self.workers is not None:
            try:
                self.workers.check()
            except Exception:
                log.debug("last worker check failed", exc_info=True)
            self.workers.stop()
            self.ctx.extra_meta.setdefault("workers_lost", self.workers.lost_list())

    # -- readings ---------------------------------------------------------------------------------

    def step(self) -> dict[str, Any] | None:
        """The current sweep step (None outside a rehearsal or before its first step).

        `ctx.step_info()` (the rehearsal's live step view) names it; the shape's current Step
        adds its times and, for open-loop steps, the offered rate (arrivals in the window / its length).
        """
        step_info = getattr(self.ctx, "step_info", None)
        info = step_info() if callable(step_info) else None
        if not info:
            return None
        out: dict[str, Any] = {
            "index": info.get("step"),
            "of": info.get("of"),
            "kind": None,
            "level": info.get("level"),
            "unit": info.get("unit"),
            "phase": info.get("phase"),
            "target_rps": info.get("target_rps"),
            "offered_rps": None,
        }
        cur = getattr(getattr(self.env, "shape_class", None), "current", None)
        if cur is not None and getattr(cur, "index", None) == out["index"]:
            out.update(kind=cur.kind, start_unix=cur.start_unix, warmup_end_unix=cur.warmup_end_unix,
                       end_unix=cur.end_unix)
            if cur.offered is not None and cur.window_s:
                out["offered_rps"] = cur.offered / cur.window_s
        return out

    def telemetry_latest(self) -> dict[str, Any]:
        collector = find_telemetry(self.env)
        if collector is None:
            return {}
        try:
            return collector.latest() or {}
        except Exception:
            log.debug("telemetry latest() failed", exc_info=True)
            return {}

    def worker_info(self) -> dict[str, Any]:
        if self.workers is not None:
            return self.workers.snapshot()
        return {"mode": "local", "count": 1, "connected": [], "lost": []}

    def runner_info(self) -> dict[str, Any]:
        """Keys of sinks.exporter's runner_info (missing/None ones are left out of /metrics)."""
        runner = self.env.runner
        info: dict[str, Any] = {
            "users": getattr(runner, "user_count", None),
            "state": getattr(runner, "state", None),
        }
        if self.workers is not None:
            info["workers"] = self.workers.snapshot()["count"]
        step = self.step()
        if step is not None:
            info.update(step=step["index"], level=step["level"], target_rps=step["target_rps"],
                        offered_rps=step["offered_rps"])
        agg = self.ctx.llm_stats.rows(time.time())[-1]
        info["achieved_rps"] = agg.get("rps")
        return info

    def snapshot(self, now_unix: float | None = None) -> dict[str, Any]:
        """The /llm/stats document."""
        now = time.time() if now_unix is None else now_unix
        runner = self.env.runner
        latest = self.telemetry_latest()
        sink = getattr(self.ctx, "sink", None)
        return {
            "unix": now,
            "state": getattr(runner, "state", None),
            "user_count": getattr(runner, "user_count", None),
            "role": self.ctx.role,
            "step": self.step(),
            "workers": self.worker_info(),
            "rows": self.ctx.llm_stats.rows(now),
            "telemetry": telemetry_summary(latest),
            "telemetry_latest": latest,
            "records_written": getattr(sink, "written", None),
            "answer": self.answer(),
        }

    def answer(self) -> dict[str, Any] | None:
        """The analysed test's plain answer, from summary.json in the results folder (None before
        the test ended). {answer, decision, report, results_dir, pending}: `pending` while the test
        has ended but its analysis has not written summary.json yet."""
        folder = Path(self.ctx.results_dir)
        path = folder / "summary.json"
        try:
            st = path.stat()
        except OSError:
            st = None
        steps = folder / "steps.json"
        stopped = getattr(self.env.runner, "state", None) == "stopped"
        if st is None or (steps.exists() and steps.stat().st_mtime > st.st_mtime + 1.0):
            if stopped and steps.exists():  # the test ended; its analysis runs in a child process
                return {"answer": None, "decision": None, "report": None, "results_dir": str(folder), "pending": True}
            return None
        key = (str(path), st.st_mtime_ns, st.st_size)
        if self._answer_cache[0] != key:
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # mid-write: the next refresh reads it whole
                return None
            answer = doc.get("answer") if isinstance(doc, dict) else None
            if not answer:
                return None
            self._answer_cache = (key, {
                "answer": answer, "decision": (doc.get("verdict") or {}).get("decision"),
                "report": "./llm/report.html" if (folder / "report.html").exists() else None,
                "results_dir": str(folder), "pending": False})
        return self._answer_cache[1]

    # -- the tab ------------------------------------------------------------------------------------

    def table_rows(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """Rows of the LLM tab: display strings (the JSON route carries the raw numbers)."""
        now = time.time() if now_unix is None else now_unix
        tel = telemetry_summary(self.telemetry_latest())
        step = self.step()
        step_s = ""
        if step is not None:
            step_s = f"{step['index'] + 1}/{step['of']} {step['level']:g} {step['unit']} ({step['phase']})"
        common = {
            "step": step_s,
            "gpu_util": _num(tel["gpu_util_pct"], 0, "%"),
            "vram": _gib(tel["vram_used_bytes"], tel["vram_total_bytes"]),
            "queue": _num(tel["server_waiting"], 0),
            "kv_cache": _num(None if tel["kv_cache_usage"] is None else 100 * tel["kv_cache_usage"], 1, "%"),
        }
        rows: list[dict[str, Any]] = []
        stats_rows = self.ctx.llm_stats.rows(now)
        for r in stats_rows:
            rows.append({
                "name": r["name"],
                "requests": r["requests"],
                "failures": r["failures"],
                "ttft_p50": _ms(r["ttft_p50_ms"]),
                "ttft_p95": _ms(r["ttft_p95_ms"]),
                "ttft_p99": _ms(r["ttft_p99_ms"]),
                "itl_p50": _ms(r["itl_p50_ms"]),
                "itl_p99": _ms(r["itl_p99_ms"]),
                "tpot_p50": _ms(r["tpot_p50_ms"]),
                "tpot_p99": _ms(r["tpot_p99_ms"]),
                "e2e_p95": _ms(r["e2e_p95_ms"]),
                "tokens_per_s": _num(r["output_tokens_per_s"], 1),
                "rps": _num(r["rps"], 2),
                **common,
            })
        # errors by kind, one row each, under the Aggregated numbers
        agg = stats_rows[-1] if stats_rows else {}
        for kind, n in (agg.get("errors_by_kind") or {}).items():
            rows.append({"name": f"errors: {kind}", "requests": "", "failures": n})
        lost = self.worker_info()["lost"]
        if lost:
            names = ", ".join(str(w["worker"]) for w in lost)
            rows.append({"name": f"LOST workers: {names}", "requests": "", "failures": ""})
        answer = self.answer()
        if answer is not None:
            # First (the tab sorts by name: "ANSWER" before "Aggregated"): the analysed test's plain answer.
            if answer["pending"]:
                text = "ANSWER: the test ended and is being analysed — reload this page in a few seconds"
            else:
                report = " — report: Download Data → Analysis report (./llm/report.html)" if answer["report"] else ""
                text = f"ANSWER: {answer['answer']}{report}"
            rows.insert(0, {"name": text, "requests": "", "failures": ""})
        return rows


TABLE_STRUCTURE: list[dict[str, str]] = [
    {"key": "name", "title": "Name"},
    {"key": "requests", "title": "# Requests"},
    {"key": "failures", "title": "# Fails"},
    {"key": "ttft_p50", "title": "TTFT p50 (ms)"},
    {"key": "ttft_p95", "title": "TTFT p95 (ms)"},
    {"key": "ttft_p99", "title": "TTFT p99 (ms)"},
    {"key": "itl_p50", "title": "ITL p50 (ms)"},
    {"key": "itl_p99", "title": "ITL p99 (ms)"},
    {"key": "tpot_p50", "title": "TPOT p50 (ms)"},
    {"key": "tpot_p99", "title": "TPOT p99 (ms)"},
    {"key": "e2e_p95", "title": "E2E p95 (ms)"},
    {"key": "tokens_per_s", "title": "Output tok/s"},
    {"key": "rps", "title": "Req/s"},
    {"key": "gpu_util", "title": "GPU util"},
    {"key": "vram", "title": "VRAM"},
    {"key": "queue", "title": "Server queue"},
    {"key": "kv_cache", "title": "KV cache"},
    {"key": "step", "title": "Step (level)"},
]


def _num(v: float | None, digits: int, suffix: str = "") -> str:
    if v is None:
        return ""
    return f"{v:.{digits}f}{suffix}"


def _ms(v: float | None) -> str:
    # ≥ 3 significant digits below 100 ms (ITL is often single-digit ms); no false precision above
    if v is None:
        return ""
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def _gib(used: float | None, total: float | None) -> str:
    if used is None:
        return ""
    s = f"{used / 2**30:.1f}"
    return f"{s} / {total / 2**30:.0f} GiB" if total else f"{s} GiB"
