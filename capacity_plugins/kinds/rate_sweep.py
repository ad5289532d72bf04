"""`kind: rate_sweep`: open loop, one step per level of requests/s, arrivals on a schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, model_validator

from capacity_plugins.contracts.steps import StepKind
from capacity_plugins.kinds.base import LoadKind, OpenLoop, PositiveFloat, StepPlan, check_warmup, open_plan

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario


@LoadKind.register("rate_sweep")
class RateSweepLoad(OpenLoop):
    sweep: ClassVar[StepKind] = "rate"

    kind: Literal["rate_sweep"] = "rate_sweep"
    levels: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0], min_length=1)
    step_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> RateSweepLoad:
        check_warmup(self.warmup_s, self.step_s)
        return self

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        return [open_plan("rate", float(r), self, self.step_s, self.warmup_s) for r in self.levels]

    def open_loop(self, scenario: Scenario) -> bool:
        return True
