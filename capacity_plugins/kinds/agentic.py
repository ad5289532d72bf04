"""`kind: agentic`: agentic sessions (corpus/agentic.py; docs/traffic.md "Agentic sessions") — closed
loop, one step per level of concurrent sessions.

Each Locust user is one session at a time: it walks a script from its first turn to its last (model
calls with the whole history, the tools' latencies between them), then takes the next script. So
the level is the number of sessions in flight, and a session never leaves the process (generator)
that started it. A session still running when a step's window closes is cut there: its remaining
calls are not sent, and it counts as not completed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from capacity_plugins.contracts.dialects import TOOL_DIALECTS
from capacity_plugins.kinds.base import LoadKind, PositiveInt, StepPlan, check_warmup

if TYPE_CHECKING:
    from capacity_plugins.corpus.sampler import SampleSource
    from capacity_plugins.scenario import Scenario


@LoadKind.register("agentic")
class AgenticLoad(LoadKind):
    summary_section: ClassVar[str | None] = "agentic"

    kind: Literal["agentic"] = "agentic"
    path: str  # JSONL session scripts, one session a line (relative to the scenario file)
    levels: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1)  # concurrent sessions
    step_s: float = Field(default=120.0, gt=0)
    spawn_rate: float = Field(default=100.0, gt=0)
    # A session's SLO: its completion time's p95 (first send → last byte), seconds; None: not judged.
    session_p95_s: float | None = Field(default=None, gt=0)
    # Model calls are fewer than a sweep's requests: a step needs this many measured ones.
    min_requests: int = Field(default=20, ge=1)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> AgenticLoad:
        check_warmup(self.warmup_s, self.step_s)
        return self

    def check(self, scenario: Scenario) -> None:
        if scenario.target.dialect not in TOOL_DIALECTS:
            raise ValueError(f"load: kind agentic sends tool calls, which the {scenario.target.dialect} dialect "
                             f"cannot carry; set target.dialect to {' or '.join(TOOL_DIALECTS)}")

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        return [StepPlan("concurrency", float(n), n, self.spawn_rate, self.step_s, self.warmup_s) for n in self.levels]

    def open_loop(self, scenario: Scenario) -> bool:
        return False

    def replay_file(self, scenario: Scenario) -> Path:
        return scenario.resolve_path(self.path)

    def check_inputs(self, scenario: Scenario) -> None:
        """Read the scripts once before anything starts: a bad line is exit 2 (file, line, field)."""
        from capacity_plugins.corpus.agentic import read_sessions

        read_sessions(self.replay_file(scenario))

    def agentic_sessions(self, scenario: Scenario) -> list[dict[str, Any]]:
        from capacity_plugins.corpus.agentic import read_sessions

        return [s.to_message() for s in read_sessions(self.replay_file(scenario))]

    def describe(self, scenario: Scenario, corpus: SampleSource) -> dict[str, Any]:
        from capacity_plugins.corpus.agentic import read_sessions

        scripts = read_sessions(self.replay_file(scenario))
        calls = [s.model_calls for s in scripts]
        return {"agentic": {"sessions_file": str(self.replay_file(scenario)), "scripts": len(scripts),
                            "model_calls_per_session": sum(calls) / len(calls),
                            "session_p95_s": self.session_p95_s}}
