"""Which steps may decide, and what the run's own accounting says against its numbers.

A step decides nothing (never sets knee, capacity or plan) when:

| field | why |
|---|---|
| `client_limited` | the load generator could not do what was asked (steps.json; the analysis re-checks the event-loop lag and schedule lag against the scenario's `load.max_loop_lag_p99_ms` / `load.max_schedule_lag_p99_ms`) |
| `membership_changed` | a worker was lost, joined or fell silent during the step (steps.json; also a `workers_lost` time of meta.json inside the step; a loss without a time leaves the steps alone and makes the decision incomplete) |
| `interrupted` | the run was stopped during the step |
| `insufficient` | fewer measured requests than `load.min_requests` (100): a P95 of 18 requests is its second-largest value, a P99 has no upper bound at all |
| no successful request, no measured window | nothing to measure |
| a cache probe's cache arm (`arm` other than `distinct`) | its prompts share prefixes or repeat, so the server's prefix cache flatters it: the probe compares it with the distinct arm (analysis/cache_probe.py), capacity counts only the distinct arm |

meta.json's `workers_lost`, `records.lost` > 0 and `complete: false` become warnings, which the
report's banner and the console headline carry.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from capacity_plugins.analysis.settings import Settings
from capacity_plugins.contracts.meta import LostWorker, Meta
from capacity_plugins.contracts.steps import OPEN_LOOP_KINDS, StepRow

# How a cache probe's cache-arm steps are set apart (the probe tells them from otherwise bad steps).
CACHE_ARM_REASON = "cache arm"


def _clock(unix: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(unix))


def _worker_name(w: LostWorker) -> str:
    return f"worker {w.worker}" if w.worker is not None else f"worker {w.client_id or '?'}"


def meta_warnings(meta: Meta) -> list[str]:
    """What meta.json's accounting says against the run (empty when nothing)."""
    out: list[str] = []
    if meta.incomplete:
        reason = meta.incomplete_reason or "interrupted"
        out.append(f"the run is incomplete ({reason}): the last step may be partial")
    for w in meta.lost_workers():
        when = w.lost_unix
        at = f" at {_clock(when)}" if when is not None else " (time unknown: any step may be affected)"
        out.append(f"{_worker_name(w)} was lost{at}: {w.reason or 'no heartbeat'}")
    lost = meta.records_lost()
    if lost is not None and lost > 0:
        out.append(f"meta.json: {lost:g} request records were lost by the writer (percentiles may be biased)")
    if meta.refusals:
        out.append(f"{len(meta.refusals)} worker(s) refused to run: the swarm was smaller than asked")
    for r in meta.reruns or []:
        if isinstance(r, dict) and r.get("step") is not None and r.get("rerun_of") is not None:
            out.append(f"step {int(r['step']) + 1} re-ran step {int(r['rerun_of']) + 1} at {r.get('level', '?'):g}: "
                       f"{r.get('reason') or 'the swarm changed'}" if isinstance(r.get("level"), (int, float)) else
                       f"step {int(r['step']) + 1} re-ran step {int(r['rerun_of']) + 1}: {r.get('reason') or 'the swarm changed'}")
    for w in meta.workers_rejoined or []:
        if isinstance(w, dict):
            out.append(f"worker {w.get('worker')} was lost ({w.get('reason') or 'no heartbeat'}) and rejoined: "
                       "the steps it missed are invalid")
    clock = meta.clock or {}
    for w in clock.get("flagged") or []:
        out.append(f"worker {w.get('worker')}'s clock offset to the master's is {w.get('why')}: its records' times "
                   "may be off" if isinstance(w, dict) else f"worker {w}'s clock offset is uncertain")
    return out


def lost_without_time(meta: Meta) -> list[LostWorker]:
    """Lost workers whose loss time is unknown (e.g. stopped without their final record batch)."""
    return [w for w in meta.lost_workers() if w.lost_unix is None]


def _membership_from_meta(st: StepRow, lost: list[LostWorker]) -> str | None:
    """A lost worker whose loss time falls inside the step changed its swarm.

    A loss without a time cannot be placed in a step: the steps keep their numbers, and the
    decision is not completed instead (analysis/outcome.py).
    """
    begin = st.start_unix
    end = st.drain_end_unix if st.drain_end_unix is not None else st.end_unix
    for w in lost:
        when = w.lost_unix
        if when is None:
            continue
        if begin is not None and end is not None and begin <= when <= end:
            return f"{_worker_name(w)} lost at {_clock(when)} (meta.json workers_lost)"
    return None


def _over(value: float | None, limit: float) -> bool:
    return value is not None and math.isfinite(value) and value > limit


@dataclass(frozen=True)
class StepValidity:
    """The validity fields of one step's row (summary.json `steps[]`, the same names)."""

    client_limited: bool
    client_limited_reason: str | None
    loop_lag_p99_ms: float | None
    schedule_lag_p99_ms: float | None
    membership_changed: bool
    membership_reason: str | None
    workers: int | None
    interrupted: bool
    insufficient: bool
    min_requests: int
    invalid_reasons: list[str]
    valid: bool


def step_validity(st: StepRow, *, requests: int, ok_requests: int, window_s: float | None,
                  settings: Settings, meta: Meta) -> StepValidity:
    """The validity of one step (see the module table)."""
    limited, why = st.client_limited, st.client_limited_reason
    if not limited and _over(st.loop_lag_p99_ms, settings.max_loop_lag_p99_ms):
        limited, why = True, (f"event-loop lag p99 {st.loop_lag_p99_ms:.0f} ms > {settings.max_loop_lag_p99_ms:g} ms "
                              "(load.max_loop_lag_p99_ms): send and receive times were stamped late")
    if not limited and st.kind in OPEN_LOOP_KINDS and _over(st.schedule_lag_p99_ms, settings.max_schedule_lag_p99_ms):
        limited, why = True, (f"sends {st.schedule_lag_p99_ms:.0f} ms behind schedule (p99) > "
                              f"{settings.max_schedule_lag_p99_ms:g} ms (load.max_schedule_lag_p99_ms)")
    changed, changed_why = st.membership_changed, st.membership_reason
    if not changed:
        from_meta = _membership_from_meta(st, meta.lost_workers())
        if from_meta:
            changed, changed_why = True, from_meta
    reasons: list[str] = []
    if limited:
        reasons.append(f"client limited: {why or 'the load generator could not keep up'}")
    if changed:
        reasons.append(f"swarm changed: {changed_why or 'a worker was lost, joined or fell silent'}")
    if st.interrupted:
        reasons.append("interrupted: the run was stopped during this step")
    insufficient = requests < settings.min_requests
    if requests and insufficient:
        reasons.append(f"insufficient: {requests} measured request(s) < {settings.min_requests} (load.min_requests)")
    if not requests:
        reasons.append("no measured requests")
    elif ok_requests == 0:
        reasons.append("no successful request")
    if not window_s:
        reasons.append("no measured window (steps.json has no times)")
    if st.arm not in (None, "distinct"):
        reasons.append(f"{CACHE_ARM_REASON} ({st.arm}): the prefix cache may flatter it — compared in the "
                       "prefix-cache probe; capacity counts the distinct arm only")
    return StepValidity(
        client_limited=bool(limited), client_limited_reason=why if limited else None,
        loop_lag_p99_ms=st.loop_lag_p99_ms, schedule_lag_p99_ms=st.schedule_lag_p99_ms,
        membership_changed=bool(changed), membership_reason=changed_why if changed else None,
        workers=st.workers, interrupted=bool(st.interrupted), insufficient=bool(insufficient),
        min_requests=settings.min_requests, invalid_reasons=reasons, valid=not reasons,
    )
