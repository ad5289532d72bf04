"""The steps.json row: one load step as the load side measured it and the analysis reads it.

The authority (the master or local process) writes `{"steps": [row, ...], "complete": bool, ...}`
after every step and at the end; `capacity analyze` reads it back with `StepRow.from_json`, which
names the field of a bad value (`steps.json: steps[2].level: missing`). Fields added later are
optional with a neutral default, so folders written by older versions still read.

Validity fields: a step whose generator could not do what was asked (`client_limited`), during
which the swarm changed (`membership_changed`), or that was cut by a stop (`interrupted`) never
sets the knee, the capacity or the plan.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from capacity_plugins.errors import UserError

# trace: one window of a replayed trace (open loop; level = the window's offered rate).
StepKind = Literal["concurrency", "rate", "peak", "trace"]
STEP_KINDS: tuple[str, ...] = ("concurrency", "rate", "peak", "trace")
# Kinds whose arrivals follow a schedule (open loop).
OPEN_LOOP_KINDS: tuple[str, ...] = ("rate", "peak", "trace")
STEPS_FILE = "steps.json"


@dataclass
class StepRow:
    index: int
    kind: StepKind
    level: float  # users (closed loop) or target rps (open loop)
    start_unix: float | None = None
    warmup_end_unix: float | None = None
    end_unix: float | None = None  # the measured window's end (the drain starts here)
    drain_end_unix: float | None = None
    target_rps: float | None = None
    # Arrivals of the global schedule inside the measured window / its length (open loop).
    offered_rps: float | None = None
    sent_rps: float | None = None
    # Requests completed successfully inside the window / its length.
    achieved_rps: float | None = None
    schedule_lag_p99_ms: float | None = None
    client_cpu_max_pct: float | None = None
    # The worst generator process's event-loop lag in the window (its ticker woke this late).
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    # The master's own loop (it sends no requests; a late master delays heartbeats and steps).
    master_loop_lag_p99_ms: float | None = None
    # Share of stream reads that found more than one whole event already waiting (a starved reader).
    backlog_read_share: float | None = None
    client_limited: bool = False
    client_limited_reason: str | None = None
    # Generator processes that reported during the window, and whether that set changed.
    workers: int | None = None
    membership_changed: bool = False
    membership_reason: str | None = None
    interrupted: bool = False
    # A cache probe's arm: `distinct` (the corpus's prompts, the one that counts) or the cache arm
    # (`shared_prefix`, `repeat`); None for every other load kind.
    arm: str | None = None
    # A re-run: the index of the step a change of the swarm invalidated, and why (that step's
    # membership_reason); None for a step run as planned.
    rerun_of: int | None = None
    rerun_reason: str | None = None

    @property
    def window_s(self) -> float | None:
        """Length of the measured window (warm-up and drain excluded)."""
        begin = self.warmup_end_unix if self.warmup_end_unix is not None else self.start_unix
        if begin is None or self.end_unix is None or self.end_unix <= begin:
            return None
        return self.end_unix - begin

    @property
    def invalid_reasons(self) -> list[str]:
        """Why the load side says this step cannot count (empty: nothing against it)."""
        out = []
        if self.client_limited:
            out.append(f"client limited: {self.client_limited_reason or 'the load generator could not keep up'}")
        if self.membership_changed:
            out.append(f"swarm changed: {self.membership_reason or 'a worker was lost or joined'}")
        if self.interrupted:
            out.append("interrupted: the run was stopped during this step")
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any, where: str) -> StepRow:
        """One row of steps.json, checked field by field (UserError naming `where.field`)."""
        if not isinstance(raw, dict):
            raise UserError(f"{where}: expected an object")
        if raw.get("level") is None:
            raise UserError(f"{where}.level: missing")
        index = raw.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise UserError(f"{where}.index: expected an integer, got {index!r}")
        kind = raw.get("kind", "concurrency")
        if kind not in STEP_KINDS:
            raise UserError(f"{where}.kind: expected {', '.join(STEP_KINDS)}, got {kind!r}")
        values: dict[str, Any] = {"index": index, "kind": kind}
        for f in fields(cls):
            if f.name in values or f.name not in raw:
                continue
            v = raw[f.name]
            if f.type in ("bool",):
                values[f.name] = bool(v)
            elif f.type in ("int | None",):
                values[f.name] = _number(v, f"{where}.{f.name}", integer=True)
            elif f.type in ("str | None",):
                values[f.name] = None if v is None else str(v)
            else:  # float and float | None
                values[f.name] = _number(v, f"{where}.{f.name}")
        return cls(**values)


def _number(v: Any, where: str, integer: bool = False) -> Any:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UserError(f"{where}: expected a number, got {v!r}")
    return int(v) if integer else float(v)
