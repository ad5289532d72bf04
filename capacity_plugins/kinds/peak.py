"""`kind: peak`: one step, a ramp then a hold — at a rate (open loop) or a number of users (closed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, model_validator

from capacity_plugins.contracts.steps import StepKind
from capacity_plugins.kinds.base import POOL_SPAWN_RATE, LoadKind, OpenLoop, StepPlan, open_plan

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario


@LoadKind.register("peak")
class PeakLoad(OpenLoop):
    sweep: ClassVar[StepKind] = "peak"

    kind: Literal["peak"] = "peak"
    # Open-loop rate to hold; None (and no users) = capacity.peak_qps × capacity.safety_factor.
    target_rps: float | None = Field(default=None, gt=0)
    # Closed-loop alternative: hold this many concurrent users.
    users: int | None = Field(default=None, ge=1)
    ramp_s: float = Field(default=30.0, ge=0)
    hold_s: float = Field(default=120.0, gt=0)
    warmup_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one_target(self) -> PeakLoad:
        if self.target_rps is not None and self.users is not None:
            raise ValueError("set either target_rps (open loop) or users (closed loop), not both")
        if self.warmup_s >= self.hold_s:
            raise ValueError(f"warmup_s ({self.warmup_s:g}) must be shorter than hold_s ({self.hold_s:g})")
        return self

    def check(self, scenario: Scenario) -> None:
        if self.target_rps is None and self.users is None and scenario.capacity.peak_qps is None:
            raise ValueError(
                "load: kind peak needs target_rps, users, or capacity.peak_qps (ramped to peak_qps × safety_factor)"
            )

    def held_rps(self, scenario: Scenario) -> float | None:
        """The open-loop rate held (None for a closed-loop peak)."""
        if self.users is not None:
            return None
        if self.target_rps is not None:
            return self.target_rps
        assert scenario.capacity.peak_qps is not None
        return scenario.capacity.peak_qps * scenario.capacity.safety_factor

    def open_loop(self, scenario: Scenario) -> bool:
        return self.held_rps(scenario) is not None

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        duration = self.ramp_s + self.hold_s
        warmup = self.ramp_s + self.warmup_s
        rps = self.held_rps(scenario)
        if rps is None:
            assert self.users is not None
            rate = self.users / self.ramp_s if self.ramp_s > 0 else POOL_SPAWN_RATE
            return [StepPlan("peak", float(self.users), self.users, rate, duration, warmup)]
        return [open_plan("peak", rps, self, duration, warmup, self.ramp_s)]
