"""`kind: capacity_search`: the highest level (users or requests/s) that meets the SLO, found by measuring.

Each step is judged as the analysis judges it (contracts/slo.py): `pass`, `fail`, or `uncertain`
when the step's own interval straddles the SLO. The search then:

1. **brackets**: from `start`, multiplies the level by `growth` after every pass until a step fails
   (or `max_level` passes: the answer is then "at least max_level"); a first step that fails goes
   down by `growth` instead, until one passes (or the smallest level fails: the SLO is not met at
   any load);
2. **bisects** between the highest pass and the lowest fail — the midpoint, rounded to whole users
   in closed loop, the geometric mean in open loop — until the bracket is within `tolerance` of
   its lower end (or one user apart), or `budget_s` of measuring is spent;
3. treats an `uncertain` step like a fail for where to look next (capacity is never claimed on a
   level the data cannot show passing), and stops when two in a row are uncertain: the noise of a
   step is then as wide as what is left of the bracket, and the bracket is the answer;
4. stops at an *invalid* step (client limited, swarm membership changed, interrupted): such a step
   decides nothing in the analysis, so steering by it would aim the next level at the load
   generator's limit instead of the server's (`halt`).

`CapacitySearch` is pure and clock-free (the step authority judges each step and asks it for the
next, through `SearchSteps`), so it is tested without a server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from capacity_plugins.contracts.slo import Judgement, min_requests_to_show
from capacity_plugins.kinds.base import LoadKind, OpenLoop, PositiveFloat, StepPlan, check_warmup, level_plan

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario

# Two consecutive steps the SLO could not be told on: the bracket has reached the noise.
NOISE_STOP = 2


@LoadKind.register("capacity_search")
class CapacitySearchLoad(OpenLoop):
    """Find the highest level that meets the SLO: grow by `growth` until a step fails, then bisect
    between the last pass and the first fail until the bracket is within `tolerance` (or one user),
    the time budget ends, or noise stops it from narrowing."""

    summary_section: ClassVar[str | None] = "search"

    kind: Literal["capacity_search"] = "capacity_search"
    loop: Literal["closed", "open"] = "closed"  # closed: levels are users; open: requests/s
    start: PositiveFloat = 1.0
    max_level: PositiveFloat = 512.0
    growth: float = Field(default=2.0, gt=1)
    tolerance: float = Field(default=0.05, gt=0, lt=1)
    budget_s: float | None = Field(default=None, gt=0)
    step_s: float = Field(default=60.0, gt=0)
    spawn_rate: float = Field(default=100.0, gt=0)  # closed loop: users started per second

    @model_validator(mode="after")
    def _sane(self) -> CapacitySearchLoad:
        check_warmup(self.warmup_s, self.step_s)
        if self.start > self.max_level:
            raise ValueError(f"start ({self.start:g}) must not exceed max_level ({self.max_level:g})")
        return self

    def check(self, scenario: Scenario) -> None:
        # A search judges each step with the step's own interval: below this many requests not
        # even a step with every request under the limits can show the attainment, so every step
        # would be "uncertain" and the search would stop at its first one.
        # With workload classes each class is judged on its own requests, by its own attainment.
        attainment = max([c.slo.attainment for c in scenario.workload_classes] or [scenario.slo.attainment])
        need = min_requests_to_show(attainment, scenario.verdict.confidence)
        if self.min_requests < need:
            per = " of every workload class" if scenario.workloads else ""
            raise ValueError(
                f"load.min_requests: {self.min_requests} is too few for a capacity search: showing "
                f"{attainment:.0%} attainment at {scenario.verdict.confidence:.0%} confidence takes at least "
                f"{need} requests{per} per step")

    def open_loop(self, scenario: Scenario) -> bool:
        return self.loop == "open"

    def plan(self, scenario: Scenario) -> list[StepPlan]:
        return [level_plan(self, self.start)]  # the first level only; the search picks the rest

    def next_steps(self, scenario: Scenario) -> SearchSteps:
        return SearchSteps(self, CapacitySearch(start=self.start, max_level=self.max_level, growth=self.growth,
                                                tolerance=self.tolerance, integer=self.loop == "closed",
                                                budget_s=self.budget_s))


@dataclass
class SearchSteps:
    """The search as the step authority drives it (kinds/base.py `NextSteps`): a judged level in,
    the next level's step out."""

    load: CapacitySearchLoad
    search: CapacitySearch

    @property
    def unit(self) -> str:
        return "users" if self.search.integer else "rps"

    @property
    def stopped(self) -> str | None:
        return self.search.stopped

    def next(self, level: float, judged: Judgement, limiting: str | None, spent_s: float) -> StepPlan | None:
        chosen = self.search.next(level, judged, limiting, spent_s=spent_s)
        return level_plan(self.load, chosen) if chosen is not None else None

    def halt(self, level: float, reason: str) -> None:
        self.search.halt(level, reason)

    def meta(self) -> dict[str, Any]:
        return {"search": self.search.result()}


@dataclass
class CapacitySearch:
    start: float
    max_level: float
    growth: float
    tolerance: float
    integer: bool  # closed loop: whole users
    budget_s: float | None = None
    min_level: float = 1.0
    highest_pass: float | None = None
    lowest_fail: float | None = None  # a fail or an uncertain level
    # (level, pass | fail | uncertain | invalid, the limit or reason)
    history: list[tuple[float, str, str | None]] = field(default_factory=list)
    stopped: str | None = None  # why the search ended (None while it runs)
    _uncertain_run: int = 0

    def __post_init__(self) -> None:
        if not self.integer:
            self.min_level = min(self.min_level, self.start)

    def first(self) -> float:
        return self._level(self.start)

    def _level(self, x: float) -> float:
        x = min(max(x, self.min_level), self.max_level)
        return float(max(1, round(x))) if self.integer else x

    def next(self, level: float, judgement: Judgement, limiting: str | None = None,
             spent_s: float = 0.0) -> float | None:
        """The level to measure next, after `level` was judged; None when the search has its answer."""
        self.history.append((level, judgement, limiting))
        if judgement == "pass":
            self._uncertain_run = 0
            self.highest_pass = level if self.highest_pass is None else max(self.highest_pass, level)
        else:
            self._uncertain_run = self._uncertain_run + 1 if judgement == "uncertain" else 0
            self.lowest_fail = level if self.lowest_fail is None else min(self.lowest_fail, level)
        if self._uncertain_run >= NOISE_STOP:
            self.stopped = "noise: the last steps could not tell the SLO apart from their own measurement noise"
            return None
        if self.budget_s is not None and spent_s >= self.budget_s:
            self.stopped = f"time budget ({self.budget_s:g} s) spent"
            return None
        lo, hi = self.highest_pass, self.lowest_fail
        if hi is None:  # still bracketing upwards
            if level >= self.max_level:
                self.stopped = f"the SLO held up to max_level ({self.max_level:g}): capacity is at least that"
                return None
            return self._level(level * self.growth)
        if lo is None:  # bracketing downwards
            if level <= self.min_level:
                self.stopped = (f"the SLO is not met even at the lowest level ({self.min_level:g})" if judgement == "fail"
                                else f"the lowest level ({self.min_level:g}) could not be shown to meet the SLO "
                                     f"({limiting or 'uncertain'}): longer steps or more requests may tell")
                return None
            return self._level(level / self.growth)
        if self._narrow_enough(lo, hi):
            self.stopped = "converged: the bracket is within the tolerance"
            return None
        mid = math.floor((lo + hi) / 2) if self.integer else math.sqrt(lo * hi)
        mid = self._level(mid)
        if mid <= lo or mid >= hi:
            self.stopped = "converged: no level left between the last pass and the first fail"
            return None
        return mid

    def halt(self, level: float, reason: str) -> None:
        """The step at `level` cannot be judged (the analysis will call it invalid): stop here."""
        self.history.append((level, "invalid", reason))
        self.stopped = f"invalid step at {level:g}: {reason}"

    def _narrow_enough(self, lo: float, hi: float) -> bool:
        if self.integer and hi - lo <= 1:
            return True
        return (hi - lo) / lo <= self.tolerance

    def result(self) -> dict[str, Any]:
        """What the search found, for steps.json and the report."""
        lo, hi = self.highest_pass, self.lowest_fail
        return {
            "highest_pass": lo,
            "lowest_fail": hi,
            "bracket": [lo, hi],
            "converged": self.stopped is not None and self.stopped.startswith("converged"),
            "stopped": self.stopped or "the run ended before the search did",
            "unit": "users" if self.integer else "rps",
            "tolerance": self.tolerance,
            "steps": [{"level": lv, "judgement": j, "limiting": why} for lv, j, why in self.history],
        }
