"""Per-step live numbers for the LLM tab: each step's distributions, throughput, validity and SLO
judgement while the sweep runs, and the answer forming (a provisional knee and capacity so far).

The cumulative LLMStats mix every level together ("TTFT p95 since the start"); a person watching
a sweep needs one point per step. `LiveSteps` keeps, per step, the same mergeable log-bucket
sketches the live stats use (sinks/sketch.py), fed by every finished record where requests.jsonl is
written (the `record` event: a worker's records arrive in its batches), and counts, per SLO limit,
the measured successful requests at or under it — enough to judge the step with the exact rule of
the capacity search (contracts/slo.py `judge_counts`, the share's Clopper-Pearson interval) without
keeping a value per request.

A record counts in its step as the step authority counts it (rehearsal/steps.py `StepAccounting`):
sent inside the measured window (warm-up and drain excluded), cancelled ones left out; throughput is
the successful completions inside the window per second of it. Validity comes from the authority
itself (`environment.capacity_steps.live_rows()`: the rows steps.json gets — client limited,
membership changed, interrupted); `insufficient` (fewer measured requests than load.min_requests) is
the analysis's rule, applied here to a finished step.

Everything here is provisional: the analysis (analysis/, which the web UI never imports — pandas is
not on worker images) re-reads requests.jsonl and has the last word; the knee and capacity below are
a plain reading of the finished valid steps, labelled provisional wherever they are shown.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from capacity_plugins.contracts.percentiles import share_interval
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.slo import LIMITS, judge_counts, reasoning_views, share_judgement
from capacity_plugins.sinks.sketch import LogHistogram

# A concurrency level "rose" when its throughput beat the best so far by this share beyond noise
# (the analysis's marginal-gain rule, analysis/knee.py GAIN_MIN).
GAIN_MIN = 0.10
# A rate step kept up when it completed this share of what was offered (analysis/knee.py).
RATE_RATIO_MIN = 0.95
Z95 = 1.96
# SLO limits judged, with the words the tab uses.
LIMIT_NAMES = {"ttft_p95_ms": "TTFT", "tpot_p95_ms": "TPOT", "e2e_p95_ms": "E2E", "itl_p95_ms": "ITL",
               "first_visible_p95_ms": "TTFOT", "tpot_visible_p95_ms": "visible TPOT"}


@dataclass
class _Tally:
    index: int
    start_unix: float
    measured: int = 0
    errors: int = 0
    completed_ok: int = 0
    output_tokens: int = 0
    hist: dict[str, LogHistogram] = field(default_factory=lambda: {
        "ttft_ms": LogHistogram(), "itl_ms": LogHistogram(), "tpot_ms": LogHistogram(), "e2e_ms": LogHistogram()})
    # record metric → [at or under its SLO limit, judged]
    within: dict[str, list[int]] = field(default_factory=dict)


class LiveSteps:
    """The steps of the running test as the tab shows them (local runner or master)."""

    def __init__(self, slo: SLOConfig | None = None, confidence: float = 0.95, open_loop: bool = False) -> None:
        self.slo = slo
        self.confidence = confidence
        self.open_loop = open_loop
        self._steps: dict[int, Any] = {}  # index → the rehearsal's Step (its times move as it runs)
        self._tally: dict[int, _Tally] = {}

    # -- inputs -------------------------------------------------------------------------------------
    def step_started(self, step: Any, **_: Any) -> None:
        old = self._steps.get(step.index)
        if old is not None and old is not step and step.start_unix > old.start_unix:
            self.reset()  # a new test from the web UI walks its steps again
        self._steps[step.index] = step
        self._tally.setdefault(step.index, _Tally(step.index, step.start_unix))

    def reset(self, **_: Any) -> None:
        self._steps.clear()
        self._tally.clear()

    def add(self, record: Any, **_: Any) -> None:
        """One finished record (contracts.records.RequestRecord)."""
        index = record.step
        step = self._steps.get(index) if index is not None else None
        if step is None:
            return
        t = self._tally[index]
        w0, w1 = step.warmup_end_unix, step.end_unix
        sent = record.sent_unix
        e2e = record.e2e_ms
        if record.ok and e2e is not None and w0 <= sent + e2e / 1000.0 < w1:
            t.completed_ok += 1
            t.output_tokens += int(record.output_tokens or 0)
        if not (w0 <= sent < w1) or record.error_kind == "cancelled":
            return
        t.measured += 1
        if not record.ok:
            t.errors += 1
            return
        h = t.hist
        if record.ttft_ms is not None:
            h["ttft_ms"].add(record.ttft_ms)
        if record.itl_ms:
            h["itl_ms"].add_many(record.itl_ms)
        if record.tpot_ms is not None:
            h["tpot_ms"].add(record.tpot_ms)
        if e2e is not None:
            h["e2e_ms"].add(e2e)
        slo = self.slo
        if slo is None:
            return
        scheduled = record.scheduled_unix is not None
        # as the SLO judges them (contracts/slo.py): open loop from the scheduled time, TPOT null → 0
        views = {
            "ttft_ms": record.ttft_from_schedule_ms if scheduled else record.ttft_ms,
            "e2e_ms": record.e2e_from_schedule_ms if scheduled else e2e,
            "tpot_ms": 0.0 if record.tpot_ms is None else record.tpot_ms,
        }
        lag = (record.sent_unix - record.scheduled_unix) * 1000.0 if record.scheduled_unix is not None else None
        # (getattr: a record-like object without a reasoning model's fields judges as one without)
        views["first_visible_ms"], views["tpot_visible_ms"] = reasoning_views(
            getattr(record, "first_visible_ms", None), getattr(record, "tpot_visible_ms", None), record.tpot_ms, lag)
        for metric, key in LIMITS:
            limit = getattr(slo, key)
            if limit is None:
                continue
            v = views[metric]
            c = t.within.setdefault(metric, [0, 0])
            c[1] += 1
            if v is not None and not math.isnan(v) and v <= limit:
                c[0] += 1

    # -- the document ---------------------------------------------------------------------------------
    def document(self, rows: list[dict[str, Any]] | None = None, *, phase: str | None = None,
                 planned: int | None = None,
                 now_unix: float | None = None) -> dict[str, Any]:
        """`{steps, slo, knee, capacity}`; `rows`: the authority's live rows (validity), by index."""
        now = time.time() if now_unix is None else now_unix
        by_index = {int(r["index"]): r for r in rows or ()}
        steps = [self._step_doc(i, by_index.get(i), phase, now) for i in sorted(self._steps)]
        finished = [s for s in steps if s["state"] == "finished"]
        return {
            "planned": planned,
            "steps": steps,
            "slo": self._slo_doc(),
            "knee": self.knee(finished),
            "capacity": self.capacity(finished),
        }

    def _slo_doc(self) -> dict[str, Any] | None:
        slo = self.slo
        if slo is None:
            return None
        limits = {k: getattr(slo, k) for k in LIMIT_NAMES if getattr(slo, k) is not None}
        return {**limits, "attainment": slo.attainment, "error_rate": slo.error_rate, "confidence": self.confidence}

    def _step_doc(self, index: int, row: dict[str, Any] | None, phase: str | None, now: float) -> dict[str, Any]:
        step = self._steps[index]
        t = self._tally[index]
        done = step.drain_end_unix is not None  # its drain ended (or the test stopped during it)
        w0 = step.warmup_end_unix
        w1 = step.end_unix if done else min(step.end_unix, now)
        window = max(w1 - w0, 0.0)
        rps = t.completed_ok / window if window > 0 else None
        h = t.hist
        q = {f"{m}_{name}": h[m].quantile(p) for m in h for name, p in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
        doc: dict[str, Any] = {
            "index": index,
            "kind": step.kind,
            "level": step.level,
            "unit": "rps" if step.target_rps is not None else "users",
            "state": "finished" if done else "running",
            "phase": None if done else phase,
            "start_unix": step.start_unix,
            "warmup_end_unix": w0,
            "end_unix": step.end_unix,
            "drain_end_unix": step.drain_end_unix,
            "target_rps": step.target_rps,
            "offered_rps": (step.offered / step.window_s) if step.offered is not None and step.window_s else None,
            "requests": t.measured,
            "errors": t.errors,
            "error_rate": t.errors / t.measured if t.measured else None,
            "achieved_rps": rps,
            "achieved_rps_half_width": Z95 * math.sqrt(t.completed_ok) / window if window > 0 and t.completed_ok else None,
            "output_tokens_per_s": t.output_tokens / window if window > 0 else None,
            **q,
            "interrupted": bool(step.interrupted),
        }
        doc.update(self._validity(doc, row, done))
        doc["slo"] = self._judge(t)
        return doc

    @staticmethod
    def _validity(doc: dict[str, Any], row: dict[str, Any] | None, done: bool) -> dict[str, Any]:
        """valid, and each reason against it as {kind, label, reason} (the row's words)."""
        issues: list[dict[str, str]] = []
        row = row or {}
        if row.get("client_limited"):
            issues.append({"kind": "client_limited", "label": "client-limited",
                           "reason": row.get("client_limited_reason") or "the load generator could not keep up"})
        if row.get("membership_changed"):
            issues.append({"kind": "membership_changed", "label": "membership changed",
                           "reason": row.get("membership_reason") or "a worker was lost or joined"})
        if row.get("interrupted") or doc["interrupted"]:
            issues.append({"kind": "interrupted", "label": "interrupted",
                           "reason": "the test was stopped during this step"})
        min_requests = int(row.get("min_requests") or 0)
        if done and min_requests and doc["requests"] < min_requests:
            issues.append({"kind": "insufficient", "label": "insufficient",
                           "reason": f"{doc['requests']} measured requests < load.min_requests {min_requests}"})
        if done and doc["requests"] and doc["requests"] == doc["errors"]:
            issues.append({"kind": "no_success", "label": "no successful request",
                           "reason": "every measured request failed"})
        return {"valid": not issues, "invalid": issues, "min_requests": min_requests or None,
                "workers": row.get("workers"), "validity_known": bool(row)}

    def _judge(self, t: _Tally) -> dict[str, Any] | None:
        slo = self.slo
        if slo is None:
            return None
        counts = {m: (c[0], c[1]) for m, c in t.within.items()}
        if not t.measured:
            return {"judgement": None, "limiting": None, "limits": [], "error_rate": None}
        judged, limiting = judge_counts(counts, t.measured, t.errors, slo, self.confidence)
        limits = []
        for metric, key in LIMITS:
            limit = getattr(slo, key)
            if limit is None:
                continue
            k, n = counts.get(metric, (0, 0))
            lo, hi = share_interval(k, n, self.confidence)
            limits.append({"key": key, "name": LIMIT_NAMES[key], "limit_ms": limit, "within": k, "n": n,
                           "share": k / n if n else None, "share_lo": lo, "share_hi": hi,
                           "judgement": share_judgement(k, n, slo.attainment, self.confidence)})
        rate = t.errors / t.measured
        return {"judgement": judged, "limiting": limiting, "limits": limits,
                "error_rate": {"value": rate, "limit": slo.error_rate,
                               "judgement": "pass" if rate <= slo.error_rate else "fail"}}

    # -- the answer forming -----------------------------------------------------------------------------
    def knee(self, finished: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Provisional knee from the finished valid steps (by level): open loop, the last level that
        still completed ≥ 95 % of its offered rate before one that did not; closed loop, the last
        level whose throughput rose ≥ 10 % beyond the noise over the best so far when the next
        level did not. None until the steps show one."""
        pts = sorted((s for s in finished if s["valid"] and s["achieved_rps"] is not None), key=lambda s: s["level"])
        if len(pts) < 2:
            return None
        unit = pts[0]["unit"]
        if unit == "rps":
            for a, b in zip(pts, pts[1:], strict=False):
                offered = b["offered_rps"] or b["target_rps"] or b["level"]
                if offered and b["achieved_rps"] / offered < RATE_RATIO_MIN:
                    return {"level": a["level"], "unit": unit, "provisional": True,
                            "reason": f"{b['level']:g} rps completed {b['achieved_rps'] / offered:.0%} of what was offered"}
            return None
        best = pts[0]
        knee = None
        for s in pts[1:]:
            x, h = s["achieved_rps"], s["achieved_rps_half_width"] or 0.0
            bx, bh = best["achieved_rps"], best["achieved_rps_half_width"] or 0.0
            # analysis/intervals.py gain_class: the 10 % gain beyond the noise of both throughputs
            if x - (1 + GAIN_MIN) * bx >= math.hypot(h, (1 + GAIN_MIN) * bh) or (bx <= 0 < x):
                best, knee = s, None
            elif knee is None:
                knee = best
        if knee is None:
            return None
        return {"level": knee["level"], "unit": unit, "provisional": True,
                "reason": f"throughput stopped rising ≥ {GAIN_MIN:.0%} beyond the noise after {knee['level']:g} {unit}"}

    def capacity(self, finished: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Provisional capacity so far: the highest throughput of a finished valid step that passes
        the SLO (None before one does)."""
        if self.slo is None:
            return None
        passing = [s for s in finished if s["valid"] and s["achieved_rps"] is not None
                   and (s["slo"] or {}).get("judgement") == "pass"]
        if not passing:
            return None
        top = max(passing, key=lambda s: s["achieved_rps"])
        return {"rps": top["achieved_rps"], "level": top["level"], "unit": top["unit"], "provisional": True}
