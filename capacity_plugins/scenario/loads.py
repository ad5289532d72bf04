"""The scenario's `load` section: how much load, when — one model per `kind`.

| kind | loop | steps |
|---|---|---|
| `concurrency_sweep` | closed (users send back to back) | one per level of users |
| `rate_sweep` | open (arrivals on a schedule) | one per level of requests/s |
| `peak` | open (`target_rps`) or closed (`users`) | one: ramp, then hold |
| `capacity_search` | closed (users) or open (rps) | chosen as it goes: bracketing, then bisection, until the SLO's boundary is found |
| `cache_probe` | closed (users) or open (rps) | two per level, back to back: the corpus's distinct prompts, then a cache arm built from them |
| `trace` | open (the trace's own arrivals) | one per `window_s` of trace time |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from capacity_plugins.scenario.sections import _Strict

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


# A P95 from fewer requests is decided by its top handful: below this a step is `insufficient`.
DEFAULT_MIN_REQUESTS = 100
# A generator whose event loop wakes this late (p99) stamps its times late: the step is client_limited.
DEFAULT_MAX_LOOP_LAG_P99_MS = 25.0


class _LoadBase(_Strict):
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


class ConcurrencySweepLoad(_LoadBase):
    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    levels: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8, 16], min_length=1)
    step_s: float = Field(default=60.0, gt=0)
    # Users started per second at each step; high so that the ramp fits inside warmup.
    spawn_rate: float = Field(default=100.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> ConcurrencySweepLoad:
        _check_warmup(self.warmup_s, self.step_s)
        return self


class _OpenLoop(_LoadBase):
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    # Gamma burstiness: coefficient of variation of the inter-arrival times (1 = Poisson).
    cv: float = Field(default=1.0, gt=0)
    max_concurrency: int = Field(default=256, ge=1)
    # Seed of the arrival schedule (the prompt order has its own seed in corpus.seed).
    seed: int = 0


class RateSweepLoad(_OpenLoop):
    kind: Literal["rate_sweep"] = "rate_sweep"
    levels: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0], min_length=1)
    step_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> RateSweepLoad:
        _check_warmup(self.warmup_s, self.step_s)
        return self


class PeakLoad(_OpenLoop):
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


class CapacitySearchLoad(_OpenLoop):
    """Find the highest level that meets the SLO (rehearsal/search.py): grow by `growth` until a step
    fails, then bisect between the last pass and the first fail until the bracket is within
    `tolerance` (or one user), the time budget ends, or noise stops it from narrowing."""

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
        _check_warmup(self.warmup_s, self.step_s)
        if self.start > self.max_level:
            raise ValueError(f"start ({self.start:g}) must not exceed max_level ({self.max_level:g})")
        return self


class CacheProbeLoad(_OpenLoop):
    """Is the prefix cache hiding the real load? Each level runs twice, back to back: the corpus's
    distinct prompts, then the same load on a cache arm built from the corpus (corpus/cache_arms.py).
    Only the distinct arm counts for capacity; the analysis compares the two (analysis/cache_probe.py)."""

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
        # The default of the chosen arm's own key, written into the results folder's copy.
        if isinstance(data, dict):
            key, default = ("pool_size", 8) if data.get("arm") == "repeat" else ("prefix_tokens", 1024)
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
        _check_warmup(self.warmup_s, self.step_s)
        return self


class TraceLoad(_LoadBase):
    """Replay a recorded trace (corpus/trace.py; docs/traffic.md): its arrivals, lengths and
    shared prefixes, `speedup` times faster, one step per `window_s` seconds of trace time."""

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


LoadConfig = Annotated[ConcurrencySweepLoad | RateSweepLoad | PeakLoad | CapacitySearchLoad | CacheProbeLoad | TraceLoad,
                       Field(discriminator="kind")]


def _check_warmup(warmup_s: float, step_s: float) -> None:
    if warmup_s >= step_s:
        raise ValueError(f"warmup_s ({warmup_s:g}) must be shorter than step_s ({step_s:g})")
