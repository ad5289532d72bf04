"""`kind: cache_probe`: is the prefix cache hiding the real load?

Each level runs twice, back to back, on the same load: the corpus's distinct prompts (the arm that
counts), then a cache arm built from the corpus (corpus/cache_arms.py) whose prompts share a long
prefix or repeat. A cache-arm step carries its `ArmSpec`, so every generator process builds the
same arm from its own corpus shard (rehearsal/cache_arm.py); the analysis compares the two arms
(analysis/cache_probe.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from capacity_plugins.corpus.cache_arms import DISTINCT, ArmSpec
from capacity_plugins.corpus.cache_arms import describe as describe_arm
from capacity_plugins.kinds.base import LoadKind, OpenLoop, PositiveFloat, StepPlan, check_warmup, level_plan

if TYPE_CHECKING:
    from capacity_plugins.corpus.sampler import SampleSource
    from capacity_plugins.scenario import Scenario


@LoadKind.register("cache_probe")
class CacheProbeLoad(OpenLoop):
    """Only the distinct arm counts for capacity; the analysis compares the two."""

    summary_section: ClassVar[str | None] = "cache_probe"
    # On the embedded simulator its prefix-cache model, or there is nothing to find.
    simulator_settings: ClassVar[dict[str, Any]] = {"prefix_cache": True}

    kind: Literal["cache_probe"] = "cache_probe"
    loop: Literal["closed", "open"] = "closed"  # closed: levels are users; open: requests/s
    levels: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 4.0], min_length=1)
    step_s: float = Field(default=60.0, gt=0)
    spawn_rate: float = Field(default=100.0, gt=0)  # closed loop: users started per second
    arm: Literal["shared_prefix", "repeat"] = "shared_prefix"
    # shared_prefix: tokens of the prefix common to every prompt of the arm (filled in when unset)
    prefix_tokens: int | None = Field(default=None, ge=16)
    # repeat: prompts in the pool the arm sends in turn (filled in when unset)
    pool_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _arm_defaults(cls, data: Any) -> Any:
        # The default of the chosen arm's own key (ArmSpec's), written into the results folder's copy.
        if isinstance(data, dict):
            key, default = (("pool_size", ArmSpec.pool_size) if data.get("arm") == "repeat"
                            else ("prefix_tokens", ArmSpec.prefix_tokens))
            if data.get(key) is None:
                data = {**data, key: default}
        return data

    @field_validator("prefix_tokens", "pool_size")
    @classmethod
    def _only_for_its_arm(cls, v: int | None, info: ValidationInfo) -> int | None:
        arm = info.data.get("arm", "shared_prefix")
        owner = "shared_prefix" if info.field_name == "prefix_tokens" else "repeat"
        if v is not None and arm != owner:
            raise ValueError(f"only used with arm: {owner} (arm is {arm})")
        return v

    @field_validator("levels")
    @classmethod
    def _users_are_whole(cls, v: list[float], info: ValidationInfo) -> list[float]:
        if info.data.get("loop", "closed") == "closed" and any(level != int(level) for level in v):
            raise ValueError("closed-loop levels are users: whole numbers (loop: open for requests/s)")
        if len(set(v)) != len(v):
            raise ValueError("each level once: both arms run at every level")
        return v

    @model_validator(mode="after")
    def _sane(self) -> CacheProbeLoad:
        check_warmup(self.warmup_s, self.step_s)
        return self

    def open_loop(self, scenario: Scenario) -> bool:
        return self.loop == "open"

    def arm_spec(self, scenario: Scenario) -> ArmSpec:
        """The cache arm this probe asks for (its prompts drawn with `corpus.seed`)."""
        own = {k: v for k, v in (("prefix_tokens", self.prefix_tokens), ("pool_size", self.pool_size)) if v is not None}
        return ArmSpec(self.arm, seed=scenario.corpus.seed, **own)

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        # Each level twice, back to back, on the same load: the distinct arm first (the one that
        # counts), then the cache arm. The cache arm's prompts never begin like a corpus prompt
        # (corpus/cache_arms.py), so what it leaves cached cannot flatter the next level's distinct arm.
        spec = self.arm_spec(scenario).to_message()
        return [replace(level_plan(self, lv), arm=arm, arm_spec=None if arm == DISTINCT else spec)
                for lv in self.levels for arm in (DISTINCT, self.arm)]

    def describe(self, scenario: Scenario, corpus: SampleSource) -> dict[str, Any]:
        # What the cache arm shares, estimated from the corpus: meta.json and steps.json.
        return {"cache_probe": describe_arm(corpus, self.arm_spec(scenario))}
