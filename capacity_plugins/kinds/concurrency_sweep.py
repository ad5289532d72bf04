"""`kind: concurrency_sweep` (the default): closed loop, one step per level of users sending back to back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from capacity_plugins.kinds.base import LoadKind, PositiveInt, StepPlan, check_warmup

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario


@LoadKind.register("concurrency_sweep")
class ConcurrencySweepLoad(LoadKind):
    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    levels: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8, 16], min_length=1)
    step_s: float = Field(default=60.0, gt=0)
    # Users started per second at each step; high so that the ramp fits inside warmup.
    spawn_rate: float = Field(default=100.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> ConcurrencySweepLoad:
        check_warmup(self.warmup_s, self.step_s)
        return self

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        return [StepPlan("concurrency", float(n), n, self.spawn_rate, self.step_s, self.warmup_s) for n in self.levels]

    def open_loop(self, scenario: Scenario) -> bool:
        return False
