"""The step timeline, per-step generator accounting, and the steps.json writer.

The master (or the local process) is the authority on step boundaries: its shape decides when a
step starts, when its measured window closes and when the drain ends. Workers learn each step from
its messages (`Step.to_message` / `Step.from_message`) and tag every record through
`StepTimeline.lookup(now_unix)`. `StepAccounting` collects what the generator did in each measured
window — records (sent, completed, schedule lag), self-watch samples (CPU per process), pacer
counters (cap hits) — and `document()` turns it into steps.json rows (`contracts.steps.StepRow`).

client_limited means the load generator could not do what was asked: sends behind
schedule (lag p99 over the threshold), a generator process's CPU stayed over the limit, or the
max-concurrency cap held arrivals back. The server completing less than offered is NOT in here:
that is saturation, which is what the knee looks for.

No Locust import: this module is plain data and arithmetic.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.contracts.slo import reasoning_views
from capacity_plugins.contracts.steps import StepKind, StepRow

# How early, by its own clock, a worker's request may be stamped before the step its users were
# spawned for: a worker reads the master's time through an estimated offset (swarm/clock.py),
# whose error under load was 1.5 ms in one CI run (a first request stamped before step 0, so in
# no step). Spawning follows the step's start, so a request this close before one is that step's.
RECORD_EARLY_S = 0.5


@dataclass
class Step:
    index: int
    kind: StepKind
    level: float  # users (closed loop) or target rps (open loop)
    start_unix: float
    warmup_end_unix: float
    end_unix: float  # measured window end = drain start (planned when the step starts)
    target_rps: float | None = None
    drain_end_unix: float | None = None
    # Open-loop steps: arrivals in the global schedule that fall in the measured window (known in advance).
    offered: int | None = None
    # The run was stopped during this step; end_unix is then the stop time.
    interrupted: bool = False
    # A cache probe's arm (`distinct`, `shared_prefix`, `repeat`), and for the cache arm how every
    # generator builds its prompts (corpus.cache_arms.ArmSpec as a message); None otherwise.
    arm: str | None = None
    arm_spec: dict[str, Any] | None = None
    # A re-run of step `rerun_of`, which a change of the swarm invalidated (`rerun_reason`).
    rerun_of: int | None = None
    rerun_reason: str | None = None

    @property
    def window_s(self) -> float:
        return max(self.end_unix - self.warmup_end_unix, 0.0)

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> Step:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class StepTimeline:
    """Ordered steps, and which one a given instant belongs to.

    `lookup` answers (index, excluded): excluded is True during a step's warmup and after its
    measured window closed (a request a worker sent before it heard the drain began) — such
    records keep their step but are left out of its numbers. Outside any step: (None, False) —
    except a record a worker stamps just before a step (`early_s`: its warm-up).
    """

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.finished = False

    def upsert(self, step: Step) -> None:
        for i, s in enumerate(self.steps):
            if s.index == step.index:
                self.steps[i] = step
                return
        self.steps.append(step)
        self.steps.sort(key=lambda s: s.index)

    def get(self, index: int) -> Step | None:
        for s in self.steps:
            if s.index == index:
                return s
        return None

    def in_drain(self, now_unix: float) -> bool:
        """Between a step's window end and its drain end: no request may start."""
        for s in reversed(self.steps):
            if now_unix >= s.start_unix:
                return now_unix >= s.end_unix and (s.drain_end_unix is None or now_unix < s.drain_end_unix)
        return False

    def lookup(self, now_unix: float, early_s: float = 0.0) -> tuple[int | None, bool]:
        """`early_s`: an instant up to that long before a step's start, outside any other step,
        belongs to the step's warm-up (excluded) — a worker's request, whose clock's estimate of
        the master's erred by that much (RECORD_EARLY_S)."""
        nxt: Step | None = None
        for s in reversed(self.steps):
            if now_unix >= s.start_unix:
                drain_end = s.drain_end_unix
                if drain_end is not None and now_unix >= drain_end:
                    break
                return s.index, not (s.warmup_end_unix <= now_unix < s.end_unix)
            nxt = s
        if nxt is not None and nxt.start_unix - now_unix <= early_s:
            return nxt.index, True
        return None, False


@dataclass(frozen=True)
class ClientLimits:
    """When the generator, not the server, was the limit (the scenario's `load` section)."""

    max_schedule_lag_p99_ms: float = 100.0
    max_client_cpu_pct: float = 90.0
    max_loop_lag_p99_ms: float = 25.0
    # Share of stream reads that found more than one event already waiting: a reader that kept up
    # gets one event per read (the server writes one chunk per decode step).
    max_backlog_read_share: float = 0.5
    # Reads fewer than this in a window say nothing about backlog (short or non-streamed steps).
    min_reads_for_backlog: int = 200

    @classmethod
    def from_load(cls, load: Any) -> ClientLimits:
        return cls(
            max_schedule_lag_p99_ms=load.max_schedule_lag_p99_ms,
            max_client_cpu_pct=load.max_client_cpu_pct,
            max_loop_lag_p99_ms=load.max_loop_lag_p99_ms,
        )


@dataclass
class _StepTally:
    sent: int = 0
    measured: int = 0  # sent in the window and finished, cancelled ones excluded
    errors: int = 0  # of those, failed
    completed_ok: int = 0
    # The SLO's view of the measured successful requests (only kept for a live capacity search).
    slo_views: dict[str, list[float | None]] = field(default_factory=dict)
    # Per workload class: measured requests and errors (a step runs on until its thinnest class has
    # min_requests), and the SLO views (a live capacity search with classes).
    class_measured: dict[str, int] = field(default_factory=dict)
    class_errors: dict[str, int] = field(default_factory=dict)
    class_views: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    lag_ms: list[float] = field(default_factory=list)
    # Live progress only (all records of the step, warmup included).
    records: int = 0
    ttft_ms: list[float] = field(default_factory=list)


class StepAccounting:
    """Per-step generator numbers, fed on the master/local process."""

    def __init__(self, timeline: StepTimeline, limits: ClientLimits | None = None, keep_slo_views: bool = False) -> None:
        self.timeline = timeline
        self.limits = limits or ClientLimits()
        self.keep_slo_views = keep_slo_views
        self._tally: dict[int, _StepTally] = defaultdict(_StepTally)
        # process key → [(unix, cpu_pct)], 1 Hz or faster, from every generator process.
        self.cpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
        # process key → [(unix, event-loop lag ms)], every tick of its ticker.
        self.loop_lag: dict[str, list[tuple[float, float]]] = defaultdict(list)
        # The master's own loop (it generates no load, so its lag does not limit the client; it
        # does delay heartbeats and step boundaries): reported beside the generators'.
        self.master_lag: list[tuple[float, float]] = []
        # (process, step) → the latest cumulative counters that process reported for the step
        # (pacer: cap_hits, dispatch_lag_p99_ms; reader: reads, backlog_reads).
        self.counters: dict[tuple[str, int], dict[str, Any]] = {}
        # step → why the swarm's membership changed during its window (lost / joined / silent).
        self.membership: dict[int, list[str]] = defaultdict(list)
        # step → generator processes that reported during its window.
        self.reporting: dict[int, set[str]] = defaultdict(set)

    # -- inputs ------------------------------------------------------------------------------------------
    def add_record(self, rec: Any) -> None:
        """One finished request attempt (a RequestRecord or a requests.jsonl dict)."""
        get = rec.get if isinstance(rec, dict) else lambda k, d=None: getattr(rec, k, d)
        index = get("step")
        if index is None:
            return
        step = self.timeline.get(int(index))
        if step is None:
            return
        t = self._tally[step.index]
        t.records += 1
        ttft = get("ttft_ms")
        if ttft is not None and get("ok"):
            t.ttft_ms.append(float(ttft))
        sent = get("sent_unix")
        scheduled = get("scheduled_unix")
        w0, w1 = step.warmup_end_unix, step.end_unix
        # Open loop: a request belongs to the window its arrival was scheduled in (it may be sent late).
        anchor = scheduled if scheduled is not None else sent
        if sent is not None and w0 <= sent < w1:
            t.sent += 1
            if get("error_kind") != "cancelled":
                t.measured += 1
                workload = get("workload")
                if workload is not None:
                    t.class_measured[workload] = t.class_measured.get(workload, 0) + 1
                if not get("ok"):
                    t.errors += 1
                    if workload is not None:
                        t.class_errors[workload] = t.class_errors.get(workload, 0) + 1
                elif self.keep_slo_views:
                    self._keep_slo_view(t.slo_views, get)
                    if workload is not None:
                        self._keep_slo_view(t.class_views.setdefault(workload, {}), get)
        if anchor is not None and w0 <= anchor < w1 and scheduled is not None and sent is not None:
            t.lag_ms.append(max(0.0, (sent - scheduled) * 1000.0))
        e2e = get("e2e_ms")
        if get("ok") and sent is not None and e2e is not None and w0 <= sent + e2e / 1000.0 < w1:
            # Completions inside the window: throughput the server actually delivered while the step ran.
            t.completed_ok += 1

    @staticmethod
    def _keep_slo_view(views: dict[str, list[float | None]], get: Any) -> None:
        """The latencies the SLO judges (as the analysis does): open loop from the scheduled time;
        a TPOT of null (one output token) counts as 0."""
        scheduled = get("scheduled_unix") is not None
        ttft = get("ttft_from_schedule_ms") if scheduled else get("ttft_ms")
        e2e = get("e2e_from_schedule_ms") if scheduled else get("e2e_ms")
        tpot = get("tpot_ms")
        sent = get("sent_unix")
        lag = (sent - get("scheduled_unix")) * 1000.0 if scheduled and sent is not None else None
        visible, pace = reasoning_views(get("first_visible_ms"), get("tpot_visible_ms"), tpot, lag)
        for key, value in (("ttft_ms", ttft), ("e2e_ms", e2e), ("tpot_ms", 0.0 if tpot is None else tpot),
                           ("first_visible_ms", visible), ("tpot_visible_ms", pace)):
            views.setdefault(key, []).append(value)

    def slo_sample(self, index: int) -> tuple[dict[str, list[float | None]], int, int]:
        """(SLO views, measured requests, errors) of a step so far (keep_slo_views only)."""
        t = self._tally.get(index)
        if t is None:
            return {}, 0, 0
        return t.slo_views, t.measured, t.errors

    def thinnest_class(self, index: int, names: Sequence[str]) -> tuple[str, int]:
        """(the class with the fewest measured requests in a step so far, its count)."""
        t = self._tally.get(index)
        counts = t.class_measured if t is not None else {}
        return min(((name, counts.get(name, 0)) for name in names), key=lambda x: x[1])

    def class_samples(self, index: int) -> dict[str, tuple[dict[str, list[float | None]], int, int]]:
        """Per workload class: (SLO views, measured requests, errors) of a step so far (keep_slo_views only)."""
        t = self._tally.get(index)
        if t is None:
            return {}
        return {name: (t.class_views.get(name, {}), n, t.class_errors.get(name, 0))
                for name, n in t.class_measured.items()}

    def add_cpu(self, process: str, unix: float, cpu_pct: float) -> None:
        self.cpu[process].append((unix, cpu_pct))
        self._reported(process, unix)

    def add_loop_lag(self, process: str, unix: float, lag_ms: float) -> None:
        self.loop_lag[process].append((unix, lag_ms))

    def add_master_lag(self, unix: float, lag_ms: float) -> None:
        self.master_lag.append((unix, lag_ms))

    def set_counters(self, process: str, step: int, counters: dict[str, Any]) -> None:
        """A process's cumulative counters for a step (the latest report replaces the previous)."""
        self.counters[(process, step)] = dict(counters)

    def note_membership(self, step: int, reason: str) -> None:
        if reason not in self.membership[step]:
            self.membership[step].append(reason)

    def _reported(self, process: str, unix: float) -> None:
        index, _ = self.timeline.lookup(unix)
        if index is not None:
            self.reporting[index].add(process)

    def measured(self, index: int) -> int:
        """Requests sent in the step's window that have finished (cancelled ones excluded) so far."""
        t = self._tally.get(index)
        return t.measured if t is not None else 0

    def progress(self, index: int) -> tuple[int, float | None]:
        """(records so far, TTFT p95 ms so far) of a step, for the console."""
        t = self._tally.get(index)
        if t is None:
            return 0, None
        return t.records, quantile(t.ttft_ms, 0.95)

    # -- outputs -----------------------------------------------------------------------------------------
    def _cpu_in(self, w0: float, w1: float) -> tuple[float | None, str | None]:
        """(max CPU % of any process in the window, the process whose CPU *stayed* over the limit)."""
        top: float | None = None
        bound: str | None = None
        for proc, samples in self.cpu.items():
            vals = sorted(v for (u, v) in samples if w0 <= u <= w1)
            if not vals:
                continue
            top = vals[-1] if top is None else max(top, vals[-1])
            # "Stayed above": the median sample, so one GC pause or import burst does not flag a step.
            if len(vals) >= 2 and vals[len(vals) // 2] > self.limits.max_client_cpu_pct and bound is None:
                bound = proc
        return top, bound

    @staticmethod
    def lag_in(samples: list[tuple[float, float]], w0: float, w1: float) -> tuple[float | None, float | None]:
        vals = [v for (u, v) in samples if w0 <= u <= w1]
        return (quantile(vals, 0.99), max(vals)) if vals else (None, None)

    def _loop_lag_in(self, w0: float, w1: float) -> tuple[float | None, float | None, str | None]:
        """(p99, max) of the event-loop lag of the worst process in the window, and that process."""
        worst: tuple[float | None, float | None, str | None] = (None, None, None)
        for proc, samples in self.loop_lag.items():
            p99, top = self.lag_in(samples, w0, w1)
            if p99 is not None and (worst[0] is None or p99 > worst[0]):
                worst = (p99, top, proc)
        return worst

    def _worst_backlog(self, index: int) -> tuple[float | None, int, str | None]:
        """(share, reads, process) of the process whose reads most often found a backlog — per
        process, so one starved worker is not averaged away by healthy ones."""
        worst: tuple[float | None, int, str | None] = (None, 0, None)
        for (proc, step), c in self.counters.items():
            reads = int(c.get("reads") or 0)
            if step != index or not reads:
                continue
            share = int(c.get("backlog_reads") or 0) / reads
            enough = reads >= self.limits.min_reads_for_backlog
            if worst[0] is None or (enough, share) > (worst[1] >= self.limits.min_reads_for_backlog, worst[0]):
                worst = (share, reads, proc)
        return worst

    def _summed(self, index: int, key: str) -> int:
        return sum(int(c.get(key) or 0) for (_p, step), c in self.counters.items() if step == index)

    def row(self, step: Step) -> dict[str, Any]:
        t = self._tally.get(step.index, _StepTally())
        lim = self.limits
        window = step.window_s
        rate = (lambda n: n / window) if window > 0 else (lambda n: None)
        w0, w1 = step.warmup_end_unix, step.end_unix
        lag_p99 = quantile(t.lag_ms, 0.99)
        cpu_max, cpu_bound = self._cpu_in(w0, w1)
        loop_p99, loop_max, loop_proc = self._loop_lag_in(w0, w1)
        master_p99, _ = self.lag_in(self.master_lag, w0, w1)
        cap_hits = self._summed(step.index, "cap_hits")
        backlog_share, reads, backlog_proc = self._worst_backlog(step.index)
        reasons: list[str] = []
        if lag_p99 is not None and lag_p99 > lim.max_schedule_lag_p99_ms:
            reasons.append(f"sends behind schedule: lag p99 {lag_p99:.0f} ms > {lim.max_schedule_lag_p99_ms:g} ms")
        if loop_p99 is not None and loop_p99 > lim.max_loop_lag_p99_ms:
            reasons.append(f"generator event loop late: lag p99 {loop_p99:.0f} ms > {lim.max_loop_lag_p99_ms:g} ms "
                           f"({loop_proc}; starved of CPU or blocked — its timestamps are late)")
        if backlog_share is not None and reads >= lim.min_reads_for_backlog and backlog_share > lim.max_backlog_read_share:
            reasons.append(f"reads found responses already waiting: {backlog_share:.0%} of {reads} stream reads "
                           f"carried more than one event (> {lim.max_backlog_read_share:.0%}; {backlog_proc})")
        if cpu_bound is not None:
            reasons.append(f"generator CPU stayed above {lim.max_client_cpu_pct:g} % ({cpu_bound})")
        if cap_hits:
            reasons.append(f"max_concurrency cap held back {cap_hits} arrivals (raise load.max_concurrency)")
        skipped = self._summed(step.index, "backoff_skips")
        paused = sum(float(c.get("backoff_s") or 0.0) for (_p, i), c in self.counters.items() if i == step.index)
        if skipped or paused >= 1.0:
            reasons.append(f"the server refused connections: the generator backed off {paused:.1f} s"
                           + (f" and dropped {skipped} arrivals" if skipped else "")
                           + " (load not delivered as planned)")
        changes = self.membership.get(step.index, [])
        return StepRow(
            index=step.index,
            kind=step.kind,
            level=step.level,
            start_unix=step.start_unix,
            warmup_end_unix=step.warmup_end_unix,
            end_unix=step.end_unix,
            drain_end_unix=step.drain_end_unix,
            target_rps=step.target_rps,
            offered_rps=rate(step.offered) if step.offered is not None else None,
            sent_rps=rate(t.sent),
            achieved_rps=rate(t.completed_ok),
            schedule_lag_p99_ms=lag_p99,
            client_cpu_max_pct=cpu_max,
            loop_lag_p99_ms=loop_p99,
            loop_lag_max_ms=loop_max,
            master_loop_lag_p99_ms=master_p99,
            backlog_read_share=backlog_share,
            client_limited=bool(reasons),
            client_limited_reason="; ".join(reasons) or None,
            workers=len(self.reporting.get(step.index, ())) or None,
            membership_changed=bool(changes),
            membership_reason="; ".join(changes) or None,
            interrupted=step.interrupted,
            arm=step.arm,
            rerun_of=step.rerun_of,
            rerun_reason=step.rerun_reason,
        ).to_json()

    def document(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {"steps": [self.row(s) for s in self.timeline.steps]}
        doc["complete"] = self.timeline.finished
        if extra:
            doc.update(extra)
        return doc


def write_steps_json(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Atomic replace: a reader (or a Ctrl-C) never sees half a file."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False), encoding="utf-8")
    os.replace(tmp, p)


def steps_from_rows(rows: Iterable[dict[str, Any]]) -> StepTimeline:
    """Rebuild a timeline from steps.json rows (re-analysis of a results folder)."""
    tl = StepTimeline()
    for r in rows:
        tl.upsert(Step.from_message(r))
    return tl
