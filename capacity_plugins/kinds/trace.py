"""`kind: trace`: replay a recorded trace (corpus/trace.py; docs/traffic.md) — its arrivals, lengths
and shared prefixes, `speedup` times faster, one step per `window_s` seconds of trace time.

Each window is a step whose level is the window's offered rate; its arrivals and requests travel
with the step (`StepPlan.trace`), and a window is never extended (it is a fixed slice of the traffic).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, model_validator

from capacity_plugins.contracts.steps import StepKind
from capacity_plugins.errors import UserError
from capacity_plugins.kinds.base import POOL_SPAWN_RATE, LoadKind, StepPlan

if TYPE_CHECKING:
    from capacity_plugins.corpus.trace import TraceRequest, TraceWindow
    from capacity_plugins.scenario import Scenario


@LoadKind.register("trace")
class TraceLoad(LoadKind):
    summary_section: ClassVar[str | None] = "trace"
    sweep: ClassVar[StepKind] = "trace"

    kind: Literal["trace"] = "trace"
    path: str  # JSONL, one request a line (relative to the scenario file)
    speedup: float = Field(default=1.0, gt=0)  # N× the recorded rate
    start_s: float = Field(default=0.0, ge=0)  # trace seconds after its first request
    duration_s: float | None = Field(default=None, gt=0)  # trace seconds to replay; None = to the end
    loop: bool = False  # start over at the end (needs duration_s)
    window_s: float = Field(default=60.0, gt=0)  # trace seconds per step
    # Tokens per hash_ids block (Mooncake's traces: 512).
    block_tokens: int = Field(default=512, ge=1)
    max_concurrency: int = Field(default=256, ge=1)
    warmup_s: float = Field(default=0.0, ge=0)  # wall seconds excluded at the start of every window
    # Windows are fixed slices of the trace: a quiet one is judged on what it has.
    min_requests: int = Field(default=20, ge=1)
    # Lines with a session_id are turns of one conversation: each sends the history so far (the
    # earlier turns and the server's answers) plus its own message, after the previous turn ended.
    sessions: bool = False

    @model_validator(mode="after")
    def _sane(self) -> TraceLoad:
        if self.loop and self.duration_s is None:
            raise ValueError("a looped trace needs duration_s")
        if self.warmup_s >= self.window_s / self.speedup:
            raise ValueError(f"warmup_s ({self.warmup_s:g}) must be shorter than a window's wall time "
                             f"(window_s / speedup = {self.window_s / self.speedup:g} s)")
        return self

    def open_loop(self, scenario: Scenario) -> bool:
        return True

    def replay_file(self, scenario: Scenario) -> Path:
        return scenario.resolve_path(self.path)

    def _cut(self, rows: list[TraceRequest]) -> list[TraceWindow]:
        from capacity_plugins.corpus.trace import trace_windows

        return trace_windows(rows, speedup=self.speedup, start_s=self.start_s, duration_s=self.duration_s,
                             loop=self.loop, window_s=self.window_s)

    def check_inputs(self, scenario: Scenario) -> None:
        """Read and cut the trace once before anything starts: a bad line is exit 2 (file, line, field)."""
        from capacity_plugins.corpus.trace import read_trace

        rows = read_trace(self.replay_file(scenario))  # its errors name the trace file and line
        try:
            self._cut(rows)
        except UserError as e:
            where = f"{scenario.source_path}: " if scenario.source_path else ""
            raise UserError(f"{where}{e}") from None

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        """One step per window of the trace: its level is the window's offered rate (requests/s)."""
        from capacity_plugins.corpus.trace import read_trace

        pool = self.max_concurrency
        spawn = max(POOL_SPAWN_RATE, float(pool))
        # A window shorter than the warmup (the last one) keeps none: it would measure nothing.
        return [StepPlan("trace", w.offered_rps, pool, spawn, w.wall_s, min(self.warmup_s, w.wall_s / 2), w.offered_rps,
                         trace=w, block_tokens=self.block_tokens, sessions=self.sessions)
                for w in self._cut(read_trace(self.replay_file(scenario)))]
