"""What every load kind is: its scenario model, the hooks the rest of the run calls, the registry.

A load kind is a pydantic model — the scenario's `load` section when `kind` names it — that also
carries the kind's behaviour, so nothing outside its module asks which kind a load is:

| hook | who calls it | what it answers |
|---|---|---|
| `plan(scenario)` | the rehearsal (`rehearsal/shapes.py plan_steps`) | the planned steps, before any extension for `min_requests` |
| `next_steps(scenario)` | the step authority | a chooser of steps after the planned ones (a capacity search), or None |
| `open_loop(scenario)` | the options, the swarm handshake | whether arrivals follow a schedule |
| `held_rps(scenario)` | `Scenario.peak_rps` | the open-loop rate a load holds throughout, if it has one |
| `simulator_settings` | the scenario, before validation | settings the kind needs on an embedded simulator (an explicit one stays) |
| `check(scenario)` | the scenario, after validation | a problem between the load and the other sections (ValueError) |
| `replay_file(scenario)` | the scenario reader, `Scenario.trace_path` | a file the load replays, made absolute |
| `check_inputs(scenario)` | `capacity run`, before anything starts | a bad input file as one UserError line |
| `describe(scenario, corpus)` | the step authority | what the kind adds to meta.json and steps.json |
| `agentic_sessions(scenario)` | the request source (rehearsal/source.py) | an agentic load's session scripts as messages, or None |
| `summary_section` | the analysis (`analysis/sections.py`) | the name of the summary section the kind adds (its summary.json key; None: none) |
| `sweep` | the analysis (`pipeline.sweep_kind`) | what its steps are measured in (`concurrency`, `rate`, `peak`, `trace`), for a run with no step to count |

A kind registers itself by name (`@LoadKind.register("peak")`, the name its `kind:` literal
holds); `capacity_plugins.kinds` imports the built-in ones, and the scenario's `load:` union is
built from the registry.

What a kind adds to the analysis and the reports is a section of the summary, named by
`summary_section` and registered under that name twice, once on each side of the results folder:
an analysis section (`@section(name)`, analysis/sections.py: built from the run's data and its step
rows, with its effects on capacity, verdict and warnings) and a report section
(`@report_section(name)`, outputs/sections.py: its Markdown, HTML and headline lines). The analysis
builds a section for a run whose kind names it; the kinds never import either side (the layers).

No Locust, gevent or pandas here: the runner and the analysis read scenarios in plain processes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from capacity_plugins.contracts.steps import StepKind
from capacity_plugins.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from capacity_plugins.contracts.slo import Judgement
    from capacity_plugins.corpus.sampler import SampleSource
    from capacity_plugins.scenario import Scenario

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]

# A P95 from fewer requests is decided by its top handful: below this a step is `insufficient`.
DEFAULT_MIN_REQUESTS = 100
# A generator whose event loop wakes this late (p99) stamps its times late: the step is client_limited.
DEFAULT_MAX_LOOP_LAG_P99_MS = 25.0
# Users started per second in an open-loop pool: they only wait for arrivals, so start them fast.
POOL_SPAWN_RATE = 200.0


# Re-runs of a step invalidated by a change of the swarm (load.max_reruns).
DEFAULT_MAX_RERUNS = 2

@dataclass(frozen=True)
class StepPlan:
    """One step as a load kind plans it; the rehearsal's shape walks a list of them."""

    kind: StepKind
    level: float  # users, or target rps
    users: int  # Locust users to run (the pool size in open loop)
    spawn_rate: float
    duration_s: float  # from the step's start to the end of its measured window
    warmup_s: float  # excluded from the step's numbers (includes any ramp)
    target_rps: float | None = None
    ramp_s: float = 0.0  # open-loop peak: arrival rate ramps 0 → target over this time
    # The window runs past duration_s until the step has min_requests measured requests, but
    # never past max_duration_s from the step's start (0: no extension).
    min_requests: int = 0
    max_duration_s: float = 0.0
    # A cache probe's arm and, for the cache arm, its build spec (Step.arm, Step.arm_spec).
    arm: str | None = None
    arm_spec: dict[str, Any] | None = None
    # Trace replay: the window's arrivals and requests (corpus.trace.TraceWindow); never extended.
    trace: Any = None
    block_tokens: int = 0
    sessions: bool = False
    # Open loop: the arrival process of the step's schedule (load.arrival, load.cv, load.seed).
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    cv: float = 1.0
    seed: int = 0
    # A re-run of an earlier step that a change of the swarm invalidated (rehearsal/authority.py):
    # that step's index, and why it was run again.
    rerun_of: int | None = None
    rerun_reason: str | None = None

    @property
    def open_loop(self) -> bool:
        return self.target_rps is not None

    @property
    def longest_s(self) -> float:
        """How long the window may last (the open-loop schedule is generated this far)."""
        return max(self.duration_s, self.max_duration_s)


class NextSteps(Protocol):
    """Chooses the steps after the planned ones from how each finished step was judged."""

    @property
    def unit(self) -> str: ...  # users | rps

    @property
    def stopped(self) -> str | None: ...  # why it chose no more steps (None while it goes on)

    def next(self, level: float, judged: Judgement, limiting: str | None, spent_s: float) -> StepPlan | None:
        """The step after the one at `level` (judged pass / fail / uncertain); None: done."""

    def halt(self, level: float, reason: str) -> None:
        """The step at `level` decides nothing (the analysis will call it invalid): stop here."""

    def meta(self) -> dict[str, Any]:
        """What it found so far, for meta.json and steps.json."""


K = TypeVar("K", bound="LoadKind")


class LoadKind(BaseModel):
    """The keys every load kind has, its hooks, and the registry of kinds by name."""

    # A typo in a capacity plan must fail loudly, not be ignored (as in every scenario section).
    model_config = ConfigDict(extra="forbid", frozen=True)

    _registry: ClassVar[dict[str, type[LoadKind]]] = {}
    # The summary section the kind adds, by name (analysis/sections.py; its summary.json key); None: none.
    summary_section: ClassVar[str | None] = None
    # What the kind's steps are measured in (summary.json `sweep_kind`: the knee's and capacity's unit),
    # said by the kind for a run with no step to count (the analysis otherwise counts the steps' kinds).
    sweep: ClassVar[StepKind] = "concurrency"
    # Settings of the embedded simulator the kind needs (scenario: filled in unless set explicitly).
    simulator_settings: ClassVar[dict[str, Any]] = {}
    if TYPE_CHECKING:
        kind: str  # each kind's own Literal: the discriminator of the scenario's `load` union

    warmup_s: float = Field(default=10.0, ge=0)
    # Longest wait for in-flight requests between steps; None = request.timeout_s.
    drain_timeout_s: float | None = Field(default=None, ge=0)
    # client_limited thresholds (docs/capacity.md): sends behind schedule, a generator process
    # CPU-bound, or its event loop waking late.
    max_schedule_lag_p99_ms: float = Field(default=100.0, gt=0)
    max_client_cpu_pct: float = Field(default=90.0, gt=0)
    max_loop_lag_p99_ms: float = Field(default=DEFAULT_MAX_LOOP_LAG_P99_MS, gt=0)
    # Measured requests a step needs (a step runs past its step_s until it has them, up to
    # max_step_s); a step that still falls short is `insufficient` and decides nothing.
    min_requests: int = Field(default=DEFAULT_MIN_REQUESTS, ge=1)
    # Longest a step may run to reach min_requests; None = 5 × its planned length.
    max_step_s: float | None = Field(default=None, gt=0)
    # A step a change of the swarm invalidated (a worker lost, silent, joined or rejoined) is run
    # again at the same level once every worker is back, at most this many times (0: never).
    max_reruns: int = Field(default=DEFAULT_MAX_RERUNS, ge=0, le=10)

    # -- the registry --------------------------------------------------------------------------------
    @classmethod
    def register(cls, name: str) -> Callable[[type[K]], type[K]]:
        """`@LoadKind.register("peak")` on a kind's model: `load: {kind: peak}` then means it."""

        def add(model: type[K]) -> type[K]:
            field = model.model_fields.get("kind")
            if field is None or field.default != name:
                raise TypeError(f"{model.__name__}: a load kind registered as {name!r} needs "
                                f"kind: Literal[{name!r}] = {name!r}")
            if name in cls._registry:
                raise ValueError(f"load kind {name!r} is registered twice "
                                 f"({cls._registry[name].__name__}, {model.__name__})")
            cls._registry[name] = model
            return model

        return add

    @classmethod
    def registered(cls) -> dict[str, type[LoadKind]]:
        """Every registered kind by name, in the order they registered."""
        return dict(cls._registry)

    # -- the hooks -------------------------------------------------------------------------------------
    @abstractmethod
    def plan(self, scenario: Scenario) -> list[StepPlan]:
        """The steps as the load section plans them (before any extension for min_requests)."""

    @abstractmethod
    def open_loop(self, scenario: Scenario) -> bool:
        """Whether arrivals follow a schedule (open loop) rather than users sending back to back."""

    def held_rps(self, scenario: Scenario) -> float | None:
        return None

    def next_steps(self, scenario: Scenario) -> NextSteps | None:
        return None

    def check(self, scenario: Scenario) -> None:
        return None

    def replay_file(self, scenario: Scenario) -> Path | None:
        return None

    def check_inputs(self, scenario: Scenario) -> None:
        return None

    def describe(self, scenario: Scenario, corpus: SampleSource) -> dict[str, Any]:
        return {}

    def agentic_sessions(self, scenario: Scenario) -> list[dict[str, Any]] | None:
        """The session scripts a generator's users walk, one whole session each (kinds/agentic.py)."""
        return None


def names() -> tuple[str, ...]:
    return tuple(LoadKind.registered())


def find(name: object) -> type[LoadKind] | None:
    """The kind registered as `name`, or None."""
    return LoadKind.registered().get(name) if isinstance(name, str) else None


def unknown(name: object) -> str:
    """The one-line answer to a `kind:` nothing registered (the scenario reader says it too)."""
    return f"kind must be one of {', '.join(names())}{did_you_mean(name, names())}"


def get(name: str) -> type[LoadKind]:
    """The kind registered as `name`; a UserError naming the closest one when there is none."""
    found = find(name)
    if found is None:
        raise UserError(f"load: {unknown(name)}")
    return found


class Pooled(Protocol):
    """A load whose open-loop steps draw arrivals on a pool of users (`OpenLoop`'s keys)."""

    @property
    def max_concurrency(self) -> int: ...
    @property
    def arrival(self) -> Literal["poisson", "gamma", "constant"]: ...
    @property
    def cv(self) -> float: ...
    @property
    def seed(self) -> int: ...


class Levelled(Pooled, Protocol):
    """A kind whose steps are levels of one loop, closed (users) or open (requests/s)."""

    @property
    def loop(self) -> Literal["closed", "open"]: ...
    @property
    def step_s(self) -> float: ...
    @property
    def warmup_s(self) -> float: ...
    @property
    def spawn_rate(self) -> float: ...


def level_plan(load: Levelled, level: float) -> StepPlan:
    """One step at `level`: whole users in closed loop, a rate over a user pool in open loop."""
    if load.loop == "closed":
        users = max(1, int(round(level)))
        return StepPlan("concurrency", float(users), users, load.spawn_rate, load.step_s, load.warmup_s)
    return open_plan("rate", float(level), load, load.step_s, load.warmup_s)


def open_plan(kind: StepKind, rps: float, load: Pooled, duration_s: float, warmup_s: float,
              ramp_s: float = 0.0) -> StepPlan:
    """An open-loop step: `rps` arrivals a second on the load's pool of max_concurrency users."""
    pool = load.max_concurrency
    return StepPlan(kind, rps, pool, max(POOL_SPAWN_RATE, float(pool)), duration_s, warmup_s, rps, ramp_s,
                    arrival=load.arrival, cv=load.cv, seed=load.seed)


def check_warmup(warmup_s: float, step_s: float) -> None:
    if warmup_s >= step_s:
        raise ValueError(f"warmup_s ({warmup_s:g}) must be shorter than step_s ({step_s:g})")


class OpenLoop(LoadKind):
    """The keys of a kind that can run in open loop: the arrival process and the user pool."""

    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    # Gamma burstiness: coefficient of variation of the inter-arrival times (1 = Poisson).
    cv: float = Field(default=1.0, gt=0)
    max_concurrency: int = Field(default=256, ge=1)
    # Seed of the arrival schedule (the prompt order has its own seed in corpus.seed).
    seed: int = 0
