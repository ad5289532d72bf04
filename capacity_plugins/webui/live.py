"""What the live view shows, computed at request time from the run's own objects.

One `LiveView` per writing process (local runner or master; a worker has no complete view). It
owns nothing the measurement core owns: LLM numbers come from the client's `LLMStats` (merged,
unrounded), the current step from the rehearsal's shape (Locust's `environment.shape_class`: its
`current` step, `phase` and `plans`), telemetry from the rehearsal's `RunTelemetry` when one runs
(`environment.capacity_telemetry`), which workers were lost from the master's `SwarmMembership`
(swarm/membership.py: a worker that died stays visible as lost). Of its own it keeps `History`:
TTFT/E2E per time bucket from every finished record (the `record` event), for the charts page (the
cumulative LLMStats percentiles cannot show how latency moved during the run).

After a test, the plain answer: the analysis runs in a child process when the test stops
(rehearsal/results.py) and writes summary.json into the results folder; `answer()` reads its `answer`
from there (once per new file), so the tab's first row and `/llm/stats` / `/llm/answer` say the same
sentence as the report and the terminal.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.summary import Summary
from capacity_plugins.errors import UserError
from capacity_plugins.sinks.stats import LLMStats
from capacity_plugins.swarm.membership import SwarmMembership
from capacity_plugins.webui.history import History
from capacity_plugins.webui.steps import LiveSteps

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0
# The tab's telemetry charts: the latest readings sampled this often while a test runs, an hour kept.
TELEMETRY_SAMPLE_S = 2.0
TELEMETRY_KEEP = 1800


# -- telemetry ------------------------------------------------------------------------------------


def find_telemetry(environment: Any) -> Any | None:
    """The run's telemetry (telemetry/wiring.py RunTelemetry, attached by the rehearsal), or None."""
    found = getattr(environment, "capacity_telemetry", None)
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

    def __init__(self, environment: Any, *, stats: LLMStats, records: Any, results: Any, role: str,
                 membership: SwarmMembership | None = None, scenario: Any = None) -> None:
        self.env = environment
        self.stats = stats
        self.records = records  # the RecordsSink (its file and count), None without a runner
        self.results = results  # the ResultsFolder: the running test's folder
        self.role = role
        self.workers = membership  # the master's; None on a local runner
        self.history = History()
        self.registry: Any = None  # the Prometheus registry /metrics serves (set by webui.attach)
        self.exporter: Any = None  # the --exporter-port server, when asked for
        self._answer_cache: tuple[Any, dict[str, Any] | None] = (None, None)
        self.scenario = scenario  # the run's Scenario (SLO, telemetry targets), None for a plain run
        slo = scenario.slo if scenario is not None else None
        self.steps = LiveSteps(slo, scenario.verdict.confidence if scenario is not None else 0.95,
                               bool(scenario is not None and scenario.open_loop))
        self.simulated = simulated_target(scenario)
        self.telemetry_history: deque[dict[str, Any]] = deque(maxlen=TELEMETRY_KEEP)
        self._sampler: Any = None

    @property
    def results_dir(self) -> Path:
        return Path(self.results.path)

    def attach(self) -> None:
        events = self.env.capacity_events
        events.record.add_listener(lambda record, **_: self.history.add(record))
        events.record.add_listener(self.steps.add)
        events.step_started.add_listener(self.steps.step_started)
        self.env.events.reset_stats.add_listener(self._on_reset)
        self.env.events.test_start.add_listener(self._on_test_start)

    def _on_reset(self, **_: Any) -> None:
        self.history.reset()

    def _on_test_start(self, **_: Any) -> None:
        # a new test (another one from the web UI): its own readings (its steps reset themselves
        # when step 0 starts again: the shape may start it before test_start fires)
        self.telemetry_history.clear()
        if self._sampler is None:
            import gevent

            self._sampler = gevent.spawn(self._sample_telemetry)

    def _sample_telemetry(self) -> None:
        import gevent

        while True:
            try:
                if getattr(self.env.runner, "state", None) in ("spawning", "running", "stopping"):
                    tel = telemetry_summary(self.telemetry_latest())
                    if any(v is not None for v in tel.values()):
                        self.telemetry_history.append({"unix": time.time(), **tel})
            except Exception:  # the tab's charts must never stop the sampler
                log.debug("telemetry sample failed", exc_info=True)
            gevent.sleep(TELEMETRY_SAMPLE_S)

    # -- readings ---------------------------------------------------------------------------------

    def step(self) -> dict[str, Any] | None:
        """The current sweep step (None outside a rehearsal or before its first step), from the
        rehearsal's shape: its times and, for open-loop steps, the offered rate (arrivals in the
        window / its length)."""
        shape: Any = getattr(self.env, "shape_class", None)
        cur = getattr(shape, "current", None)
        if cur is None:
            return None
        out: dict[str, Any] = {
            "index": cur.index,
            "of": len(shape.plans),
            "kind": cur.kind,
            "level": cur.level,
            "unit": "rps" if cur.target_rps is not None else "users",
            "phase": shape.phase,
            "target_rps": cur.target_rps,
            "offered_rps": None,
            "start_unix": cur.start_unix,
            "warmup_end_unix": cur.warmup_end_unix,
            "end_unix": cur.end_unix,
        }
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
        agg = self.stats.rows(time.time())[-1]
        info["achieved_rps"] = agg.get("rps")
        return info

    def snapshot(self, now_unix: float | None = None) -> dict[str, Any]:
        """The /llm/stats document."""
        now = time.time() if now_unix is None else now_unix
        runner = self.env.runner
        latest = self.telemetry_latest()
        sink = self.records
        return {
            "unix": now,
            "state": getattr(runner, "state", None),
            "user_count": getattr(runner, "user_count", None),
            "role": self.role,
            "step": self.step(),
            "workers": self.worker_info(),
            "rows": self.stats.rows(now),
            "telemetry": telemetry_summary(latest),
            "telemetry_latest": latest,
            "records_written": getattr(sink, "written", None),
            "answer": self.answer(),
        }

    def answer(self) -> dict[str, Any] | None:
        """The analysed test's plain answer, from summary.json in the results folder (None before
        the test ended). {answer, decision, report, results_dir, pending}: `pending` while the test
        has ended but its analysis has not written summary.json yet."""
        folder = self.results_dir
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
                summary = Summary.load(path)  # a UI test's own analysis: one run's summary
            except UserError:  # mid-write: the next refresh reads it whole
                return None
            answer = summary.answer
            if not answer:
                return None
            self._answer_cache = (key, {
                "answer": answer, "decision": summary.verdict.decision,
                # the analysis's knee and capacity: the tab's charts draw them in place of its provisional ones
                "knee": summary.knee.value, "knee_unit": summary.knee.unit,
                "capacity_rps": summary.capacity.per_node_rps,
                "results_dir": str(folder), "pending": False})
        cached = self._answer_cache[1]
        if cached is None:
            return None
        # report.html is written after summary.json: asked at every call, not cached with it
        return {**cached, "report": "./llm/report.html" if (folder / "report.html").exists() else None}

    # -- the LLM tab's own view (/llm/live) ---------------------------------------------------------------

    def authority(self) -> Any | None:
        """The rehearsal's step authority (rehearsal/authority.py, `environment.capacity_steps`), or None."""
        found = getattr(self.env, "capacity_steps", None)
        return found if found is not None and hasattr(found, "live_rows") else None

    def swarm_health(self, now_unix: float | None = None) -> dict[str, Any]:
        """Workers connected, lost, late or silent; each generator's loop lag and records produced
        (what it said it made) vs received (what reached requests.jsonl here)."""
        now = time.time() if now_unix is None else now_unix
        info = self.worker_info()
        authority = self.authority()
        processes: list[dict[str, Any]] = []
        if authority is not None:
            try:
                processes = authority.live_swarm(now)
            except Exception:
                log.debug("live_swarm failed", exc_info=True)
        accounting: dict[str, Any] = {}
        sink = self.records
        if sink is not None and hasattr(sink, "accounting"):
            try:
                accounting = sink.accounting()
            except Exception:
                log.debug("records accounting failed", exc_info=True)
        by_worker = accounting.get("by_worker") or {}
        connected = {w["worker"]: w for w in info.get("connected", [])}
        lost = {w["worker"] for w in info.get("lost", [])}
        for p in processes:
            w = p.get("worker")
            if w is not None:
                got = by_worker.get(w) or by_worker.get(str(w)) or {}
                p["produced"] = got.get("produced_reported")
                p["received"] = got.get("received")
                c = connected.get(w)
                p["users"] = c.get("users") if c else None
                p["cpu_pct"] = c.get("cpu_pct") if c else None
                if w in lost:
                    p["health"] = "lost"
            elif p["process"] == "local":
                p["produced"] = accounting.get("produced")
                p["received"] = accounting.get("written")
        known = {p.get("worker") for p in processes}
        for w, c in connected.items():  # connected but no Watch yet (between tests, or no scenario)
            if w not in known:
                got = by_worker.get(w) or by_worker.get(str(w)) or {}
                processes.append({"process": f"worker-{w}", "worker": w, "health": "connected", "age_s": None,
                                  "in_flight": None, "loop_lag_p99_ms": None, "loop_lag_max_ms": None,
                                  "users": c.get("users"), "cpu_pct": c.get("cpu_pct"),
                                  "produced": got.get("produced_reported"), "received": got.get("received")})
        counts = {h: sum(1 for p in processes if p.get("health") == h) for h in ("late", "silent")}
        return {"mode": info["mode"], "connected": info["count"], "lost": info.get("lost", []),
                "late": counts["late"], "silent": counts["silent"], "processes": processes}

    def notes(self) -> list[str]:
        """What the tab's provisional numbers do not cover, said where they are shown."""
        sc = self.scenario
        if sc is not None and getattr(sc, "workload_classes", None):
            return ["workload classes: the tab judges every request by the scenario's slo; the report judges "
                    "each class by its own SLO and the mix by the first class to miss"]
        return []

    def live(self, now_unix: float | None = None) -> dict[str, Any]:
        """The /llm/live document the tab's script draws: per-step numbers, the answer forming,
        the over-time series, telemetry (marked simulated), swarm health, the answer at the end."""
        now = time.time() if now_unix is None else now_unix
        authority = self.authority()
        rows: list[dict[str, Any]] = []
        if authority is not None:
            try:
                rows = authority.live_rows(now)
            except Exception:
                log.debug("live_rows failed", exc_info=True)
        shape: Any = getattr(self.env, "shape_class", None)
        plans = getattr(shape, "plans", None)
        steps = self.steps.document(rows, phase=getattr(shape, "phase", None),
                                    planned=len(plans) if plans is not None else None, now_unix=now)
        latest = self.telemetry_latest()
        return {
            "unix": now,
            "state": getattr(self.env.runner, "state", None),
            "role": self.role,
            "user_count": getattr(self.env.runner, "user_count", None),
            "step": self.step(),
            **steps,
            "simulated": self.simulated,
            "notes": self.notes(),
            "telemetry": {**telemetry_summary(latest), "simulated": self.simulated},
            "telemetry_history": list(self.telemetry_history),
            "history": {"bucket_s": self.history.bucket_s, "points": self.history.points(now)},
            "swarm": self.swarm_health(now),
            "answer": self.answer(),
        }

    # -- the tab ------------------------------------------------------------------------------------

    def table_rows(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """Rows of the LLM tab: display strings (the JSON route carries the raw numbers)."""
        now = time.time() if now_unix is None else now_unix
        tel = telemetry_summary(self.telemetry_latest())
        step = self.step()
        step_s = ""
        if step is not None:
            step_s = f"{step['index'] + 1}/{step['of']} {step['level']:g} {step['unit']} ({step['phase']})"
        sim = " (simulated)" if self.simulated else ""
        common = {
            "step": step_s,
            "gpu_util": _mark(_num(tel["gpu_util_pct"], 0, "%"), sim),
            "vram": _mark(_gib(tel["vram_used_bytes"], tel["vram_total_bytes"]), sim),
            "queue": _mark(_num(tel["server_waiting"], 0), sim),
            "kv_cache": _mark(_num(None if tel["kv_cache_usage"] is None else 100 * tel["kv_cache_usage"], 1, "%"), sim),
        }
        rows: list[dict[str, Any]] = []
        stats_rows = self.stats.rows(now)
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
                text = "ANSWER: the test ended and is being analysed — the answer appears above this table in a few seconds"
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


def simulated_target(scenario: Any) -> bool:
    """Whether the run's server and GPU readings come from the embedded simulator: the scenario's
    target is `embedded`, or it scrapes telemetry of kind `simulator` (the report says the same
    from meta.json `simulated`)."""
    if scenario is None:
        return False
    if getattr(scenario.target, "embedded", False):
        return True
    scrape = getattr(getattr(scenario, "telemetry", None), "scrape", None) or []
    return any(getattr(t, "kind", None) == "simulator" for t in scrape)


def _mark(text: str, mark: str) -> str:
    return f"{text}{mark}" if text else text


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
