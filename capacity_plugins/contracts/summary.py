"""summary.json: what `capacity analyze` writes, as the models the analysis builds and every view reads.

One JSON object; written next to `summary.md`, `report.html` and the PNGs
(`throughput_latency.png`, `latency_distributions.png`, `timeline.png` when telemetry exists,
`ttft_breakdown.png` when a step has a server TTFT part). Numbers that cannot be known are `null`
(never NaN). Times in ms unless the key says otherwise; rates in requests per second (`rps`); the
forecast input keeps the planners' word (`peak_qps`).

Intervals are `[low, high]` lists at `verdict_settings.confidence` (0.95), named after their
number with `_ci` before the unit (`e2e_p95_ci_ms` is the interval of `e2e_p95_ms`); an end the
data cannot support is `null` (the P99 of 18 requests has no upper bound). Methods:
docs/capacity.md, "Uncertainty".

The analysis builds a `Summary` (analysis/pipeline.py), a repeat set's analysis a
`RepeatSetSummary` (analysis/repeats.py); compare, the matrix, the gates, the reports and the web
UI read their attributes. `load_summary(path)` reads either back; files written before these
models existed (schema 2) read unchanged. docs/results-schema.md is generated from this module
(`python -m capacity_plugins.contracts.schema_doc`).

Python: `from capacity_plugins import analyze; summary = analyze(Path(dir), overrides={...})`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field

from capacity_plugins.contracts.document import Interval, Number, Section, read_json
from capacity_plugins.contracts.image_latency import ImageLatency
from capacity_plugins.contracts.meta import CacheArm, LostWorker, Meta, Records, Search
from capacity_plugins.contracts.pareto import Pareto
from capacity_plugins.contracts.planning import SLOConfig, VerdictConfig
from capacity_plugins.contracts.reasoning import Reasoning
from capacity_plugins.errors import UserError

# 2: intervals (`*_ci*`), step validity, `run`, `outcome`, the `verdict` settings.
SCHEMA_VERSION = 2
SUMMARY_FILE = "summary.json"

Judgement = Literal["pass", "fail", "uncertain"]
Decision = Literal["scale", "dont_scale_yet", "observe"]


# ---------------------------------------------------------------- the per-step table


class SloLimit(Section):
    """One SLO limit judged on one step (or one class in a step)."""

    limit_ms: float | None = None
    attainment: float | None = None
    """Share of successful requests at or under the limit (a missing value counts as over)."""
    attainment_ci: Interval | None = None
    quantile_ms: float | None = None
    """The value at the attainment quantile, i.e. the P95 for 0.95 (unbounded: null)."""
    quantile_ci_ms: Interval | None = None
    passed: bool = Field(False, validation_alias=AliasChoices("pass", "passed"), serialization_alias="pass")
    """`pass` on disk: the point judgement."""
    judgement: Judgement = "uncertain"
    """`pass`: the attainment interval is at or above `slo.attainment`; `fail`: below; `uncertain`: it straddles."""


class ClassRow(Section):
    """A workload class in one step (`steps[].workloads`): the class's own requests, judged by its own SLO.

    Its validity in the step: `insufficient` (its `requests` < `min_requests`), `valid`,
    `invalid_reasons` (the step's own reasons hold for every class)."""

    requests: int = 0
    ok_requests: int = 0
    errors: int = 0
    error_rate: float | None = None
    error_rate_ci: Interval | None = None
    rps: float | None = None
    attainment_target: float | None = None
    """The class's `slo.attainment`."""
    error_rate_limit: float | None = None
    """The class's `slo.error_rate`."""
    rps_ci: Interval | None = None
    ttft_p50_ms: float | None = None
    ttft_p50_ci_ms: Interval | None = None
    ttft_p95_ms: float | None = None
    ttft_p95_ci_ms: Interval | None = None
    ttft_p99_ms: float | None = None
    ttft_p99_ci_ms: Interval | None = None
    tpot_p50_ms: float | None = None
    tpot_p50_ci_ms: Interval | None = None
    tpot_p95_ms: float | None = None
    tpot_p95_ci_ms: Interval | None = None
    tpot_p99_ms: float | None = None
    tpot_p99_ci_ms: Interval | None = None
    e2e_p50_ms: float | None = None
    e2e_p50_ci_ms: Interval | None = None
    e2e_p95_ms: float | None = None
    e2e_p95_ci_ms: Interval | None = None
    e2e_p99_ms: float | None = None
    e2e_p99_ci_ms: Interval | None = None
    slo: dict[str, SloLimit] = Field(default_factory=dict)
    """{metric: limit judged}, against the class's own limits."""
    good_requests: int = 0
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    slo_pass: bool = False
    slo_judgement: Judgement = "uncertain"
    insufficient: bool = False
    valid: bool = False
    invalid_reasons: list[str] = Field(default_factory=list)


class StepSummary(Section):
    """One load step (`steps[]`; warm-up records and `cancelled` attempts excluded).

    Latency percentiles come from the raw records with their order-statistic intervals: `ttft_p50_ms`
    … `ttft_p99_ms`, `itl_p*_ms` (all chunk gaps of the step pooled; their intervals count requests,
    not gaps), `tpot_p*_ms`, `e2e_p*_ms`, each with its `*_ci_ms`; for open-loop steps also
    `ttft_from_schedule_p*_ms` and `e2e_from_schedule_p*_ms`. Open-loop steps (rate/peak with
    `scheduled_unix`) are judged on TTFT/E2E from the scheduled time; closed-loop steps from the send
    time. TPOT is null for requests with ≤1 output token and counts as 0 for the SLO (vLLM's rule).
    The ITL limit (`itl_p95_ms`, optional) is judged on the pooled gaps.

    Telemetry means/maxima over the step (`gpu_util_pct` … `client_cpu_max_pct`) are simulated when
    `run.simulated`. Where TTFT goes (means in ms; docs/capacity.md, "Where TTFT goes"): the
    server's histograms (Δsum ÷ Δcount between the first and the last scrape inside the measured
    window, pooled over replicas and engines; null when the server does not export that histogram,
    or no observation completed) next to the client's own TTFT mean.

    With workload classes (scenario `workloads:`; docs/capacity.md, "Workload classes") the row also
    has `workloads` {class name: class row}, and its SLO fields are the **mix's**: `slo` holds every
    class's limits keyed `<class>.<metric>` (`chat.ttft_ms`; a class with no request in the step
    shows none), `slo_pass` is true when every class with requests passes its own SLO,
    `slo_judgement` is `fail` when any class fails, `uncertain` when any class is uncertain or
    insufficient, else `pass`; `good_requests`, `goodput_rps` and `slo_attainment` count the requests
    that met their own class's SLO.
    """

    SOMETIMES = frozenset({
        "rps_littles_law", "server_deferred",
        "ttft_from_schedule_p50_ms", "ttft_from_schedule_p50_ci_ms", "ttft_from_schedule_p95_ms",
        "ttft_from_schedule_p95_ci_ms", "ttft_from_schedule_p99_ms", "ttft_from_schedule_p99_ci_ms",
        "e2e_from_schedule_p50_ms", "e2e_from_schedule_p50_ci_ms", "e2e_from_schedule_p95_ms",
        "e2e_from_schedule_p95_ci_ms", "e2e_from_schedule_p99_ms", "e2e_from_schedule_p99_ci_ms",
        "workloads", "conclusion",
    })
    step: int = 0
    """The step's index in steps.json."""
    kind: str = "concurrency"
    """`concurrency`, `rate`, `peak` or `trace` (contracts/steps.py)."""
    level: float = 0.0
    """Users (closed loop) or target rps (open loop)."""
    arm: str | None = None
    """A cache probe's `distinct` or cache arm, else null."""
    window_s: float | None = None
    """The measured window: warm-up end → end."""
    target_rps: float | None = None
    offered_rps: float | None = None
    """Arrivals actually scheduled in the window, per second."""
    achieved_rps: float | None = None
    """steps.json's, else records / window."""
    requests: int = 0
    """Attempts."""
    ok_requests: int = 0
    errors: int = 0
    cancelled: int = 0
    error_rate: float | None = None
    error_rate_ci: Interval | None = None
    """Clopper–Pearson."""
    rps: float | None = None
    """Successful requests per second: in a closed loop by Little's law, users / mean E2E × success
    share; otherwise counted, successful requests / window."""
    rps_ci: Interval | None = None
    rps_ci_method: str | None = None
    """`littles_law`: the wider of batch means of the E2E and the server's renewal noise;
    `batch_means`: 10 sub-windows of counts, Student t; `counting`: Garwood's Poisson interval below 50 requests."""
    rps_method: str | None = None
    """`littles_law` or `counting`."""
    rps_counted: float | None = None
    """The count, always; in a closed loop the cross-check."""
    rps_counted_ci: Interval | None = None
    rps_methods_agree: bool | None = None
    """Closed loop: whether the two agree within both intervals — `false` means the loop was not closed
    as assumed and the count was used, with Little's figure in `rps_littles_law`; null: no Little's law."""
    rps_littles_law: float | None = None
    error_kinds: dict[str, int] = Field(default_factory=dict)
    ttft_p50_ms: float | None = None
    ttft_p50_ci_ms: Interval | None = None
    ttft_p95_ms: float | None = None
    ttft_p95_ci_ms: Interval | None = None
    ttft_p99_ms: float | None = None
    ttft_p99_ci_ms: Interval | None = None
    tpot_p50_ms: float | None = None
    tpot_p50_ci_ms: Interval | None = None
    tpot_p95_ms: float | None = None
    tpot_p95_ci_ms: Interval | None = None
    tpot_p99_ms: float | None = None
    tpot_p99_ci_ms: Interval | None = None
    e2e_p50_ms: float | None = None
    e2e_p50_ci_ms: Interval | None = None
    e2e_p95_ms: float | None = None
    e2e_p95_ci_ms: Interval | None = None
    e2e_p99_ms: float | None = None
    e2e_p99_ci_ms: Interval | None = None
    itl_p50_ms: float | None = None
    itl_p50_ci_ms: Interval | None = None
    itl_p95_ms: float | None = None
    itl_p95_ci_ms: Interval | None = None
    itl_p99_ms: float | None = None
    itl_p99_ci_ms: Interval | None = None
    open_loop: bool = False
    ttft_from_schedule_p50_ms: float | None = None
    ttft_from_schedule_p50_ci_ms: Interval | None = None
    ttft_from_schedule_p95_ms: float | None = None
    ttft_from_schedule_p95_ci_ms: Interval | None = None
    ttft_from_schedule_p99_ms: float | None = None
    ttft_from_schedule_p99_ci_ms: Interval | None = None
    e2e_from_schedule_p50_ms: float | None = None
    e2e_from_schedule_p50_ci_ms: Interval | None = None
    e2e_from_schedule_p95_ms: float | None = None
    e2e_from_schedule_p95_ci_ms: Interval | None = None
    e2e_from_schedule_p99_ms: float | None = None
    e2e_from_schedule_p99_ci_ms: Interval | None = None
    output_tokens_per_s: float | None = None
    output_tokens_mean: float | None = None
    e2e_mean_ms: float | None = None
    slo: dict[str, SloLimit] = Field(default_factory=dict)
    """{metric: limit judged} (`ttft_ms`, `tpot_ms`, `e2e_ms`, `itl_ms`; with classes `<class>.<metric>`)."""
    goodput_rps: float | None = None
    """Requests meeting every SLO latency limit / window."""
    good_requests: int = 0
    slo_attainment: float | None = None
    """Good / requests."""
    slo_pass: bool = False
    """Every limit's attainment ≥ `slo.attainment` **and** error rate ≤ `slo.error_rate`."""
    slo_judgement: Judgement = "uncertain"
    """The limits' judgements, with the error rate on its point."""
    gpu_util_pct: float | None = None
    """Mean over time and devices."""
    gpu_util_max_pct: float | None = None
    sm_active: float | None = None
    vram_used_gb: float | None = None
    """Max."""
    vram_total_gb: float | None = None
    gpu_temp_max_c: float | None = None
    gpu_power_w: float | None = None
    """Mean."""
    server_running: float | None = None
    server_waiting: float | None = None
    """Mean of the sum over engines."""
    server_waiting_max: float | None = None
    server_deferred: float | None = None
    """Mean of the sum over engines of the queued requests held back by a transient constraint, not
    by a lack of batch slots (vLLM's `num_requests_waiting_by_reason{reason="deferred"}`): with LoRA
    adapters, requests whose adapter cannot join a batch that already holds `--max-loras` adapters.
    Part of `server_waiting`; null when the server does not report it."""
    kv_cache_usage_max: float | None = None
    """0–1."""
    client_cpu_max_pct: float | None = None
    server_queue_mean_ms: float | None = None
    server_prefill_mean_ms: float | None = None
    server_ttft_mean_ms: float | None = None
    client_ttft_mean_ms: float | None = None
    """The client's TTFT mean over the requests whose first token arrived between the scrapes the
    server TTFT mean runs between (the ones its histogram counted), else over the step's measured
    successful requests."""
    client_remainder_ms: float | None = None
    """`client_ttft_mean_ms` − `server_ttft_mean_ms`: network + client; null without a server TTFT."""
    ttft_queue_share: float | None = None
    """`server_queue_mean_ms` ÷ `server_ttft_mean_ms`, or ÷ `client_ttft_mean_ms` when the server exports no TTFT."""
    ttft_queue_share_basis: str | None = None
    """`server_ttft`, `client_ttft`, or null."""
    ttft_window_unix: Interval | None = None
    """[first, last] scrape the server TTFT mean runs between; null without one."""
    client_limited: bool = False
    client_limited_reason: str | None = None
    """steps.json's, or the analysis's own when `loop_lag_p99_ms` > `load.max_loop_lag_p99_ms` or,
    open loop, `schedule_lag_p99_ms` > `load.max_schedule_lag_p99_ms`."""
    loop_lag_p99_ms: float | None = None
    schedule_lag_p99_ms: float | None = None
    membership_changed: bool = False
    membership_reason: str | None = None
    """steps.json's, or a meta.json `workers_lost` time inside the step."""
    workers: int | None = None
    interrupted: bool = False
    insufficient: bool = False
    """`requests` < `min_requests`."""
    min_requests: int = 0
    invalid_reasons: list[str] = Field(default_factory=list)
    """Each reason in words; a cache probe's cache-arm step always has "cache arm (…)"."""
    valid: bool = False
    """No invalid reason: only valid steps take part in knee, capacity, plan and verdict."""
    workloads: dict[str, ClassRow] | None = None
    """With workload classes: {class name: class row}."""
    conclusion: str | None = None
    """One line: "GPU not saturated", "queueing starts: latency ×1.5 …", "throughput flat (+4%, within
    noise)", "invalid: insufficient: … — decides nothing", …"""


# A row the SLO rules judge: a step, or one class in a step.
Judged = StepSummary | ClassRow


# ---------------------------------------------------------------- run-wide sections


class InvalidStep(Section):
    step: int = 0
    level: float = 0.0
    reasons: list[str] = Field(default_factory=list)


class RunFacts(Section):
    """The run facts every report opens with (`run`)."""

    SOMETIMES = frozenset({"repeats"})
    date_utc: str | None = None
    start_unix: Number | None = None
    """meta.json's, else the steps'."""
    end_unix: Number | None = None
    duration_s: Number | None = None
    target: str | None = None
    """meta.json `target`, else the scenario's, printed without user info and with credential-named
    query parameters redacted."""
    model: str | None = None
    dialect: str | None = None
    scenario: str | None = None
    load_kind: str | None = None
    simulated: bool = False
    """The target was the embedded simulator: its GPU and server readings are simulated."""
    simulated_because: str | None = None
    complete: bool = True
    incomplete_reason: str | None = None
    workers_lost: list[LostWorker] = Field(default_factory=list)
    """meta.json's list."""
    records: Records | None = None
    """meta.json's accounting."""
    slo_limits: list[str] = Field(default_factory=list)
    """The limits judged, each with the key that set it."""
    confidence: float = 0.95
    min_requests: int = 0
    invalid_steps: list[InvalidStep] = Field(default_factory=list)
    repeats: list[str] | None = None
    """A repeat set: the repeats' folder names."""


class TtftBreakdown(Section):
    """Where TTFT goes, for the whole run."""

    server_parts: dict[str, bool] = Field(default_factory=dict)
    """{`server_queue_s`, `server_prefill_s`, `server_ttft_s`: whether telemetry_series.csv has that
    histogram (with its `_count` rows)}."""
    server_kinds: list[str] = Field(default_factory=list)
    """meta.json's scrape kinds, GPU exporters left out."""
    notes: list[str] = Field(default_factory=list)
    """Each part the server does not export, said once; or that there are no server histograms at all."""


class Usl(Section):
    SOMETIMES = frozenset({"amdahl_x_max", "amdahl_n90", "why_untrusted"})
    lambda_: float | None = Field(None, validation_alias=AliasChoices("lambda", "lambda_"), serialization_alias="lambda")
    """`lambda` on disk."""
    alpha: float | None = None
    beta: float | None = None
    beta_ci95: Interval | None = None
    n_star: float | None = None
    x_star: float | None = None
    trusted: bool = False
    """β's 95 % CI excludes 0 and N* lies in the tested range."""
    amdahl_x_max: float | None = None
    amdahl_n90: float | None = None
    why_untrusted: str | None = None


class Kneedle(Section):
    value: float | None = None
    x: str = "log2(level)"


class CrossChecks(Section):
    """Never the answer on their own."""

    SOMETIMES = frozenset({"usl", "kneedle"})
    usl: Usl | None = None
    kneedle: Kneedle | None = None
    """≥ 7 levels only, on log2 level."""


class ToDecide(Section):
    """What would decide a knee the noise left undecided or not high-confidence (concurrency sweeps)."""

    requests_per_step: int = 0
    """The requests a 10 % difference needs at the noisiest step's throughput interval."""
    step_s: int = 0
    """The measured window at the slowest level."""
    repeats: int = 0
    text: str = ""


class Knee(Section):
    """The saturation knee (informational)."""

    SOMETIMES = frozenset({"saturated_from_first", "gains", "gain_classes", "ratios", "ratio_floors",
                           "cross_checks", "to_decide", "excluded_levels"})
    value: float | None = None
    """Null when none."""
    unit: str = "users"
    """`users` / `rps`."""
    bracket: Interval | None = None
    """[last level before the flat, first flat level]."""
    interval: Interval | None = None
    """[earliest, latest level the knee may be at given the noise]."""
    method: str = "none"
    """`marginal_gain` (concurrency sweeps), `achieved_over_offered` (rate sweeps), `none`."""
    confidence: str | None = None
    """`high`: two further levels shown flat; `medium`: one of them only within noise, latency did not
    grow, or a trusted USL fit disagrees; `low`: only one level follows."""
    reason: str = ""
    saturated_from_first: bool | None = None
    """No gain beyond the first level."""
    gains: list[float | None] | None = None
    """Per level, the gain over the best so far (the first: null)."""
    gain_classes: list[str] | None = None
    """Per level: `rise` — a ≥ 10 % gain over the best so far beyond the noise of both —, `flat`, `unclear`."""
    ratios: list[float | None] | None = None
    """Rate sweeps: achieved / offered per level."""
    ratio_floors: list[float] | None = None
    """Rate sweeps: the ratio a step must fall under — 0.95, or lower when the step is so short that
    completions-in-window vs arrivals-in-window differ by counting alone: 3·√(2·rate·mean E2E) requests."""
    cross_checks: CrossChecks | None = None
    to_decide: ToDecide | None = None
    excluded_levels: list[float] | None = None
    """Invalid steps."""


class Capacity(Section):
    """Capacity per node under the SLO (the primary number) — a run's, or a repeat set's mean.

    A run's: achieved rps interpolated linearly between the last passing and the first failing valid
    step against the limiting metric's quantile, ÷ `replicas_behind_url`. With workload classes this
    is the **mix's** capacity: the lowest class capacity (the load at which any class first misses
    its own SLO), with its `method`, `limiting_slo` and levels, plus `limiting_workload`;
    `per_node_rps_ci` / `per_node_concurrency_ci` run from the lowest low end to the lowest high end
    of the classes' intervals; the first `notes` entry says which class limits, the rest are that
    class's notes prefixed with its name.

    A repeat set's (`method: repeats`): the mean over the repeats with a Student-t interval on their
    values (`interval_kind` `run_to_run`; `within_run` when only one repeat has a capacity), and the
    repeats' `sd`, `min`, `max`, `values`, `n`, `methods`.
    """

    SOMETIMES = frozenset({
        # a run's
        "limiting_slo", "last_pass_level", "first_fail_level", "replicas_behind_url", "last_pass_rps",
        "first_fail_rps", "bracket_requests", "bracket_width", "unknown_reason", "measure_next", "excluded_steps",
        "per_node_concurrency_ci", "limiting_workload", "requests_to_show",
        # a repeat set's
        "sd", "min", "max", "values", "n", "methods", "interval_kind",
    })
    per_node_rps: float | None = None
    """Requests/s one node carries within the SLO; null: unknown (never 0 for unknown)."""
    per_node_concurrency: float | None = None
    """The same interpolation on the level for concurrency sweeps; Little's law rps × mean E2E for rate sweeps."""
    limiting_slo: str | None = None
    """A run's: `ttft_ms`, `tpot_ms`, `e2e_ms`, `itl_ms`, `error_rate`."""
    last_pass_level: float | None = None
    """A run's: the valid level the SLO last held at."""
    first_fail_level: float | None = None
    """A run's: the first valid level it failed at."""
    method: str | None = None
    """`interpolated`; `never_failed` — a lower bound, extend the sweep —; `not_measured_below` (the SLO
    already fails at the lowest valid level: capacity null, unknown, not 0); `fails_at_lowest_load`
    (capacity 0: a closed-loop step at one user — one request alone — already misses the SLO);
    `utilisation_cap` — only when no SLO limit is set: 70 % of the best sustained throughput —;
    `no_valid_steps`; a repeat set's `repeats`."""
    replicas_behind_url: int | None = None
    """A run's: nodes behind the measured URL (every figure is per node)."""
    notes: list[str] = Field(default_factory=list)
    last_pass_rps: float | None = None
    """`interpolated`: the throughput per node at the last passing level."""
    first_fail_rps: float | None = None
    """`interpolated`: the throughput per node at the first failing level."""
    bracket_requests: int | None = None
    """Requests of the fewer-measured of the two steps the capacity is read between — the best step
    for `never_failed`: what a too-wide interval's "requests per step" advice scales."""
    bracket_width: float | None = None
    """Relative; > 0.2 adds a "refine" note."""
    unknown_reason: str | None = None
    """A run's: when `per_node_rps` is null, what was not measured — "the SLO already fails at 16 users,
    the lowest valid level (levels 1–8 users were excluded: client limited): capacity below 16 users
    was not measured"; else null."""
    measure_next: str | None = None
    """A run's: when `per_node_rps` is null, what run would measure it — "rerun the levels below 16
    users with more load-generator processes (--processes N)", or "add lower levels (e.g. 1, 2, 4, 8
    users)"; else null."""
    excluded_steps: list[int] | None = None
    """A run's: the invalid steps (by index)."""
    per_node_rps_ci: list[float] | None = None
    """A run's: the same rule at the pessimistic and the optimistic end of every valid step's
    intervals; a repeat set's: the Student-t interval of the mean."""
    per_node_concurrency_ci: list[float] | None = None
    """A run's, as `per_node_rps_ci`."""
    relative_interval: float | None = None
    """Width ÷ capacity; the plan refuses above `verdict.max_capacity_interval`."""
    requests_to_show: int | None = None
    """A run's, written when the interval's pessimistic end fails at a step that passes as measured
    but holds fewer successful requests than any step needs to show its SLO met: that fewest number
    (72 for 95 % at 95 % confidence, when every request is within the limits; with workload classes,
    per class). Lengthening the steps until each holds it is what narrows the interval."""
    limiting_workload: str | None = None
    """With workload classes: the class that misses first (null when no class missed its SLO at a valid
    level: a lower bound; the first class without a valid step when one has none: unknown)."""
    sd: float | None = None
    """A repeat set's: the repeats' standard deviation."""
    min: float | None = None
    """A repeat set's."""
    max: float | None = None
    """A repeat set's."""
    values: list[float | None] | None = None
    """A repeat set's: each repeat's capacity (null: unknown)."""
    n: int | None = None
    """A repeat set's: repeats with a capacity."""
    methods: list[str | None] | None = None
    """A repeat set's: each repeat's `method`."""
    interval_kind: str | None = None
    """A repeat set's: `run_to_run`, or `within_run` when only one repeat has a capacity."""


class Setting(Section):
    """A setting that decided a reason, hint or the plan."""

    key: str = ""
    """`slo.*`, `verdict.*`, `load.*`, `capacity.*`."""
    value: Any = None
    meaning: str = ""


class Plan(Section):
    """Nodes / GPUs for the forecast peak: `nodes` = ceil(peak_qps × safety_factor / per_node_rps) +
    redundancy, `gpus` = nodes × gpus_per_node. No 70 % cap is applied on top of an SLO-measured capacity."""

    peak_qps: float | None = None
    peak_concurrency: float | None = None
    safety_factor: float | None = None
    redundancy: int | None = None
    current_nodes: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    nodes_interval: list[int] | None = None
    """[nodes at the capacity interval's high end, at its low end]."""
    gpus: int | None = None
    gpus_by_concurrency: int | None = None
    """ceil(peak_concurrency / per_gpu_concurrency) (e.g. 200 / 20 = 10, no extra factor)."""
    per_gpu_concurrency: float | None = None
    peak_share_of_current_capacity: float | None = None
    """peak / (per_node_rps × current_nodes, or 1 node)."""
    trigger_share: float | None = None
    """`verdict.trigger_share`, 0.7."""
    trigger_reached: bool | None = None
    """share ≥ trigger_share (was `trigger_70pct`)."""
    refused: str | None = None
    """Null, or why the data cannot size a fleet: an unknown capacity — its `unknown_reason` and
    `measure_next` —, an interval reaching 0 or wider than `verdict.max_capacity_interval` — then
    `nodes`, `gpus` are null and the decision is incomplete."""
    infeasible: str | None = None
    """Null, or "the SLO fails already with one request at a time: no number of nodes meets it":
    capacity 0 at both ends of its interval, an answer, not a refusal."""
    notes: list[str] = Field(default_factory=list)
    settings: list[Setting] = Field(default_factory=list)
    """The settings the plan used, in `verdict.settings`' shape."""


class Cost(Section):
    SOMETIMES = frozenset({"effective_share", "effective_basis_level"})
    gpu_hour_usd: float | None = None
    per_1k_requests_usd: float | None = None
    """One node running at its capacity under the SLO."""
    per_1k_requests_ci_usd: list[float] | None = None
    """The same at the ends of the capacity interval."""
    per_1m_output_tokens_usd: float | None = None
    per_effective_output_usd: float | None = None
    """Node cost per second ÷ goodput at the highest passing step — only successful, SLO-meeting
    outputs carry the cost."""
    basis: str | None = None
    effective_share: float | None = None
    """With a passing step: its SLO-meeting share of requests."""
    effective_basis_level: float | None = None
    """With a passing step: the highest passing level, the effective cost's basis."""


class EvidenceLevels(Section):
    highest_passing: float | None = None
    first_failing: float | None = None
    decided_at: float | None = None
    """The step the decision rests on: its GPU figure is the one every reason and hint quotes."""


class Verdict(Section):
    """`scale` / `dont_scale_yet` / `observe`, why, and the bottleneck (a repeat set's: decision and reasons).

    Rules, in order (thresholds from `verdict_settings`): fewer than `min_valid_steps` valid steps →
    observe; the SLO failing with GPU util < `gpu_idle_pct` and queue < `queue_idle_max` →
    dont_scale_yet (not the GPU); no capacity / no forecast / the plan refused → observe; nodes
    needed ≤ current → dont_scale_yet; peak at `trigger_share`–100 % of current capacity → observe;
    no GPU telemetry → observe; GPU > `gpu_busy_pct` or KV > `kv_cache_full`, and at the forecast peak
    the SLO fails (or E2E P99 > `peak_e2e_p99_ms` when set), with nodes needed > current → scale;
    otherwise observe. Whatever decided, two reasons from where TTFT goes may follow (queueing
    dominating TTFT at the step the decision rests on; a large measuring-path remainder at any valid step).
    """

    SOMETIMES = frozenset({"rule", "bottleneck", "bottleneck_hints", "measure_next", "settings", "evidence_levels",
                           "trace_first_broken_window"})
    decision: Decision = "observe"
    rule: str | None = None
    """A run's: the rule that decided: `too_few_valid_steps`, `gpu_not_the_bottleneck`, `capacity_unknown`,
    `capacity_zero_within_noise`, `infeasible`, `no_peak`, `plan_refused`, `fleet_carries_the_peak`,
    `no_margin`, `no_gpu_telemetry`, `scale`, `scale_rule_not_met`."""
    reasons: list[str] = Field(default_factory=list)
    """Plain sentences with the evidence numbers, no configuration key inside."""
    bottleneck: str | None = None
    """A run's: `gpu`, `kv_cache`, `memory`, `feeding`, `cpu`, `thermal`, `adapters`, `unknown`."""
    bottleneck_hints: list[str] | None = None
    """A run's: plain words, the same step's figures as the reasons."""
    measure_next: list[str] | None = None
    """A run's: what to measure next, in words."""
    settings: list[Setting] | None = None
    """A run's: the settings that decided the reasons, hints and plan, once each in order of first use."""
    evidence_levels: EvidenceLevels | None = None
    """A run's."""
    trace_first_broken_window: int | None = None
    """A trace replay: the index of the first window whose SLO broke."""


class ChecklistItem(Section):
    """`review.1`…`review.7` (the scale review) and `pre.1`…`pre.6` (the preconditions;
    docs/capacity.md lists both). Items no load test can observe are `needs_human`."""

    id: str = ""
    text: str = ""
    status: Literal["pass", "fail", "needs_human"] = "needs_human"
    evidence: str = ""


class Stability(Section):
    """Drift and growth over the run (soak runs): P95 drift > ×1.25, error rate +1 point, VRAM growth > 2 %/h."""

    SOMETIMES = frozenset({"ttft_p95_first_third_ms", "ttft_p95_last_third_ms", "e2e_p95_first_third_ms",
                           "e2e_p95_last_third_ms", "error_rate_first_third", "error_rate_last_third", "trends"})
    soak: bool = False
    """Load kind `soak` or ≥ 30 min."""
    duration_s: float = 0.0
    findings: list[str] = Field(default_factory=list)
    ttft_p95_first_third_ms: float | None = None
    ttft_p95_last_third_ms: float | None = None
    e2e_p95_first_third_ms: float | None = None
    e2e_p95_last_third_ms: float | None = None
    error_rate_first_third: float | None = None
    error_rate_last_third: float | None = None
    trends: dict[str, float] | None = None
    """{`vram_used_bytes_per_h`, `kv_cache_usage_per_h`, `server_waiting_per_h`, `gpu_temp_c_per_h`}."""


class WorkloadClass(Section):
    SOMETIMES = frozenset({"model"})  # only a class that names its own model

    name: str = ""
    weight: Number = 0.0
    model: str | None = None
    """The model the class's requests named (a LoRA adapter, another model behind the endpoint);
    null: the run's model."""
    slo: SLOConfig = Field(default_factory=SLOConfig)
    """The class's SLO as judged: its own limits over the top-level `slo` and flag overrides."""
    requests: int = 0
    """Measured, all steps."""
    insufficient_levels: list[float] = Field(default_factory=list)
    """Levels where the class had requests but fewer than `min_requests`."""
    capacity: Capacity = Field(default_factory=Capacity)
    """The class's own capacity over the steps as that class sees them: the step's level and total
    throughput, the class's judgement and validity — so it is in the mix's requests/s."""
    share: float | None = None
    """Of all classes' measured requests."""


class ItemsStep(Section):
    """One step of an embeddings / rerank run in items."""

    level: float = 0.0
    items_per_s: float | None = None
    """Successful requests/s × `batch_size` (the step's `rps`, so its method and interval)."""
    items_per_s_ci: Interval | None = None
    input_tokens_per_s: float | None = None
    """The server's input-token counts (usage) of the successful measured requests / the window; null
    when the server reports none (TEI's native routes)."""
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    valid: bool = False


class Items(Section):
    """An embeddings or rerank run (dialects of `contracts.dialects.ITEM_DIALECTS`) in items: each
    request carries `batch_size` texts or documents, answered whole and judged on E2E latency."""

    kind: str = ""
    """`embeddings` or `rerank`."""
    dialect: str = ""
    batch_size: int = 1
    steps: list[ItemsStep] = Field(default_factory=list)
    per_node_items_per_s: float | None = None
    """The capacity (`capacity.per_node_rps`, the rps the plan and verdict use) × `batch_size`."""
    per_node_items_per_s_ci: Interval | None = None
    line: str = ""
    """The section in one sentence."""


class AgenticStep(Section):
    """One step of an agentic run (load kind `agentic`): its level is the concurrent sessions."""

    level: float = 0.0
    """Concurrent sessions (Locust users, each walking one session at a time)."""
    sessions_completed: int = 0
    """Sessions whose last model call ended successfully in the measured window (its `session_ms` set)."""
    sessions_per_min: float | None = None
    """Completed sessions per minute: by Little's law, level × 60 ÷ the completed sessions' mean
    completion time (`sessions_per_min_method` littles_law, five sessions or more), else
    `sessions_completed` ÷ the window × 60 (counting)."""
    sessions_per_min_ci: list[float] | None = None
    """Its interval at `verdict.confidence`: Student t on the mean completion time (littles_law) or
    Garwood's Poisson interval of the count (counting); the high end null when unbounded (the mean's low end ≤ 0)."""
    sessions_per_min_method: str | None = None
    """`littles_law` or `counting` (analysis/intervals.py)."""
    session_p50_s: float | None = None
    session_p95_s: float | None = None
    """Nearest-rank percentiles of the completed sessions' completion times (first send → last byte)."""
    calls_per_session: float | None = None
    """Model calls per completed session (mean)."""
    tool_wait_mean_ms: float | None = None
    """The measured tool latency waited before a model call, mean over the window's calls after tools."""
    rps: float | None = None
    """The step's model calls per second (the step row's `rps`)."""
    ttft_p95_ms: float | None = None
    """Per model call: TTFT P95 (the step row's)."""
    first_visible_p95_ms: float | None = None
    """Per model call: time to first output token P95 (the step row's, when measured)."""
    session_slo_pass: bool | None = None
    """`session_p95_s` ≤ load.session_p95_s; null when that SLO is not set or no session completed."""
    slo_pass: bool = False
    """The step row's verdict on the run's per-call SLO (TTFT, time to first output token, …)."""
    valid: bool = False


class Agentic(Section):
    """An agentic run (load kind `agentic`, analysis/agentic.py): capacity in sessions."""

    SOMETIMES = frozenset({"session_p95_limit_s", "per_node_sessions", "per_node_sessions_per_min",
                           "per_node_sessions_per_min_ci", "per_node_rps", "limited_by"})
    steps: list[AgenticStep] = Field(default_factory=list)
    session_p95_limit_s: float | None = None
    """load.session_p95_s: the session SLO (completion time P95), when set."""
    per_node_sessions: float | None = None
    """Concurrent sessions one node holds within every SLO: the lower of the run's capacity in
    users (`capacity.per_node_concurrency`, the per-call SLO) and the highest valid level whose
    session P95 held, ÷ `capacity.replicas_behind_url`."""
    per_node_sessions_per_min: float | None = None
    """Completed sessions per minute at that level (the passing step's, ÷ replicas)."""
    per_node_sessions_per_min_ci: list[float] | None = None
    """Its interval (the passing step's `sessions_per_min_ci`, ÷ replicas)."""
    per_node_rps: float | None = None
    """Model calls per second at that level (÷ replicas), beside the capacity's requests/s."""
    limited_by: str | None = None
    """`session_slo`, `per_call_slo`, `never_failed` (a lower bound: extend the levels) or null (unknown)."""
    line: str = ""
    """The section in one plain sentence."""


class Workloads(Section):
    """Each workload class's SLO and capacity and the class that limits the mix."""

    classes: list[WorkloadClass] = Field(default_factory=list)
    limiting: str | None = None
    """The class that misses its SLO first, or null."""
    order: list[str] = Field(default_factory=list)
    """Class names by capacity, lowest first: the order they fail in."""
    rule: str = ""


class ProbeArm(Section):
    """One arm of a level: the step's own invalid reasons (`problems`), the cache arm's standing
    exclusion left out; `prompt_tokens_mean` is the server's count over measured successful requests;
    `prefix_cache_hit_rate` the mean of the step's `prefix_cache_hit_rate` telemetry rows."""

    SOMETIMES = frozenset({"requests", "ttft_p50_ms", "ttft_p50_ci_ms", "ttft_p95_ms", "ttft_p95_ci_ms", "rps",
                           "rps_ci", "output_tokens_per_s", "prompt_tokens_mean", "prefix_cache_hit_rate"})
    step: int | None = None
    sound: bool = False
    problems: list[str] = Field(default_factory=list)
    requests: int | None = None
    ttft_p50_ms: float | None = None
    ttft_p50_ci_ms: Interval | None = None
    ttft_p95_ms: float | None = None
    ttft_p95_ci_ms: Interval | None = None
    rps: float | None = None
    rps_ci: Interval | None = None
    output_tokens_per_s: float | None = None
    prompt_tokens_mean: float | None = None
    prefix_cache_hit_rate: float | None = None


class ProbeDelta(Section):
    distinct: float | None = None
    cache: float | None = None
    change: float | None = None
    """cache / distinct − 1."""
    noise: float | None = None
    """The absolute change it had to exceed: both half-widths combined plus `min_detectable_difference`
    × the distinct value; null when an interval has no bound."""
    judgement: str = "unknown"
    """`cache_flatters` (the cache arm looks better beyond the noise), `cache_arm_worse`, `within noise`, `unknown`."""


class ProbeLevel(Section):
    level: float = 0.0
    unit: str = "users"
    distinct: ProbeArm = Field(default_factory=ProbeArm)
    cache: ProbeArm = Field(default_factory=ProbeArm)
    compared: bool = False
    """Both arms measured and sound."""
    deltas: dict[str, ProbeDelta] = Field(default_factory=dict)
    """{`ttft_p50_ms`, `ttft_p95_ms`, `rps`}."""


class CacheProbe(Section):
    """The prefix-cache probe (analysis/cache_probe.py; how to read it: docs/capacity.md, "Prefix-cache
    probe"). The cache arm's steps stay in `steps` with `arm` set and `valid: false` (reason "cache
    arm (…)"), so `knee`, `capacity`, `plan` and `verdict` come from the distinct arm."""

    arm: str | None = None
    """The cache arm: `shared_prefix` or `repeat`."""
    counted_arm: str = "distinct"
    """The arm capacity, knee and plan use."""
    spec: CacheArm | None = None
    """meta.json's `cache_probe`: how the cache arm was built and what it shares."""
    server_prefix_caching: bool | None = None
    """What a scraped server's `vllm:cache_config_info` says."""
    min_detectable_difference: float = 0.0
    levels: list[ProbeLevel] = Field(default_factory=list)
    status: str = "not_compared"
    """`cache_flatters`, `no_effect`, `cache_arm_worse`, `not_compared`."""
    answer: str = ""
    notes: list[str] = Field(default_factory=list)
    """Levels not compared and why, P50 judged where a P95 has no bound, a distinct arm that hit the cache itself."""


class TraceWindow(Section):
    """One window of the replayed trace (one step). Its SLO judgement counts even when the window is
    flagged (`valid: false`): where the traffic broke the SLO is the question."""

    window: int = 0
    trace_start_s: float = 0.0
    trace_end_s: float = 0.0
    offered_rps: float | None = None
    achieved_rps: float | None = None
    requests: int | None = None
    slo_pass: bool | None = None
    """Null: no requests."""
    ttft_p95_ms: float | None = None
    ttft_from_schedule_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    valid: bool | None = None
    invalid_reasons: list[str] = Field(default_factory=list)
    missed: list[str] = Field(default_factory=list)


class TraceTurn(Section):
    """One turn of a multi-turn replay, over successful measured requests: the prompt grows with the
    history, and a prefix cache shows as a lower TTFT."""

    turn: int = 0
    requests: int = 0
    prompt_tokens_mean: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None


class Trace(Section):
    """A trace replay (`load.kind: trace`): per window the offered and achieved rates, the SLO, and the
    first window where it broke."""

    speedup: float = 1.0
    window_s: float = 60.0
    start_s: float = 0.0
    path: str | None = None
    """From the scenario copy."""
    windows: list[TraceWindow] = Field(default_factory=list)
    first_broken_window: int | None = None
    """Index of the first window whose SLO broke; null when it held everywhere."""
    line: str = ""
    """The sentence the verdict's first reason repeats."""
    turns: list[TraceTurn] = Field(default_factory=list)
    """A multi-turn replay, else empty."""


class Outcome(Section):
    """Whether the decision could be completed (false → `capacity analyze` exits 1)."""

    decision_complete: bool = True
    reasons: list[str] = Field(default_factory=list)
    """"no requests were recorded", "no valid step: …", "plan refused: …", "the run is incomplete (…)",
    "N worker(s) lost at an unknown time: …"."""


class SummaryMeta(Meta):
    """Provenance copied from meta.json — its keys `COPIED`, as they are, when it has them, and its
    `target` without credentials — and where the analysis read it. A repeat set's has `results_dir` and its runs' `labels` only."""

    # meta.json's keys the summary copies (provenance and accounting)
    COPIED: ClassVar[tuple[str, ...]] = (
        "versions", "model", "server", "dialect", "gpu", "gpus", "gpu_names", "incomplete", "incomplete_reason",
        "start_unix", "end_unix", "records", "workers", "workers_lost", "labels")
    requests_total: int | None = None
    """Request records read (measured or not)."""
    results_dir: str | None = None
    """The results folder analysed."""

    def cache_hit_rate(self) -> float | None:
        """A cache hit rate an older or hand-made summary carried in its meta (`prefix_cache_hit_rate`,
        `cache_hit_rate`); no analysis writes one, so `capacity compare`'s row is unknown otherwise."""
        extra = self.model_extra or {}
        v = extra.get("prefix_cache_hit_rate") or extra.get("cache_hit_rate")
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


SummaryMeta.SOMETIMES = frozenset(SummaryMeta.model_fields)


class Summary(Section):
    """summary.json of one run.

    `search`, `workloads`, `cache_probe` and `trace` are the sections only some runs have (null
    otherwise: a load kind or a scenario feature adds one, analysis/sections.py); a section registered
    from outside the package adds a key of its own name at the top level, after the keys below.
    """

    # Written only when set: sections added after schema 2's first files were written (item_rates:
    # an embeddings / rerank run; reasoning: answers with thinking; pareto: a sweep that decoded output;
    # images: requests that carried images).
    SOMETIMES = frozenset({"item_rates", "reasoning", "pareto", "images", "agentic"})

    schema_version: int = SCHEMA_VERSION
    """2 (1 had no intervals, validity fields, `run`, `outcome`, `verdict_settings`)."""
    name: str | None = None
    """scenario.yaml `name`."""
    sweep_kind: str = "concurrency"
    """`concurrency`, `rate`, `peak` or `trace` (the steps' kind; `trace`: no knee, windows are not a sweep)."""
    run: RunFacts = Field(default_factory=RunFacts)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    """The SLO used (scenario `slo` + flag overrides)."""
    verdict_settings: VerdictConfig = Field(default_factory=VerdictConfig)
    """The decision thresholds used (scenario `verdict` + flag overrides; docs/capacity.md, "Verdict")."""
    min_requests: int = 0
    """Measured requests a step needs (scenario `load.min_requests` or `--min-requests`; default 100)."""
    steps: list[StepSummary] = Field(default_factory=list)
    ttft_breakdown: TtftBreakdown = Field(default_factory=TtftBreakdown)
    knee: Knee = Field(default_factory=Knee)
    capacity: Capacity = Field(default_factory=Capacity)
    plan: Plan = Field(default_factory=Plan)
    cost: Cost = Field(default_factory=Cost)
    verdict: Verdict = Field(default_factory=Verdict)
    stability: Stability = Field(default_factory=Stability)
    search: Search | None = None
    """Null unless the load kind was `capacity_search`; then the search's account, copied from meta.json
    unchanged (the capacity itself is still computed from the steps)."""
    workloads: Workloads | None = None
    """Null unless the scenario has `workloads:`."""
    cache_probe: CacheProbe | None = None
    """Null unless the steps carry arms (load kind `cache_probe`)."""
    trace: Trace | None = None
    """Null unless the load kind was `trace`."""
    item_rates: Items | None = None
    """Absent unless the dialect is an embeddings or rerank one: the run in items/s (analysis/items.py)."""
    reasoning: Reasoning | None = None
    """Written when some answer had reasoning tokens (contracts/reasoning.py)."""
    pareto: Pareto | None = None
    """Each step's output tokens/s per GPU against per user, the frontier marked (contracts/pareto.py);
    written when a step decoded output."""
    images: ImageLatency | None = None
    """Written when some request carried images: latency by image count per step (contracts/image_latency.py)."""
    agentic: Agentic | None = None
    """Written for an agentic run (load kind `agentic`): sessions per node and per minute (analysis/agentic.py)."""
    warnings: list[str] = Field(default_factory=list)
    """Things the reader must know: incomplete run, lost workers, lost records, refusing workers, a cut
    last line of requests.jsonl, a simulated target, insufficient steps, no telemetry, …"""
    meta: SummaryMeta = Field(default_factory=SummaryMeta)
    checklist: list[ChecklistItem] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    answer: str = ""
    """The plain answer every view opens with (analysis/answer.py): what one node serves within the SLO
    (or why that is unknown and what to run next), what the forecast peak needs against the nodes you
    have, and the decision in capitals."""

    def valid_steps(self) -> list[StepSummary]:
        return [r for r in self.steps if r.valid]


# ---------------------------------------------------------------- a repeat set


class LevelStats(Section):
    """One figure at one level over the repeats."""

    mean: float | None = None
    sd: float | None = None
    min: float | None = None
    max: float | None = None
    ci: list[float] | None = None
    """Student t of the mean."""
    n: int = 0
    values: list[float | None] = Field(default_factory=list)
    """Per repeat, null where invalid."""


class SetLevel(Section):
    level: float = 0.0
    valid_repeats: list[str] = Field(default_factory=list)
    invalid_repeats: list[str] = Field(default_factory=list)
    rps: LevelStats = Field(default_factory=LevelStats)
    goodput_rps: LevelStats = Field(default_factory=LevelStats)
    ttft_p95_ms: LevelStats = Field(default_factory=LevelStats)
    e2e_p50_ms: LevelStats = Field(default_factory=LevelStats)
    e2e_p95_ms: LevelStats = Field(default_factory=LevelStats)
    e2e_p99_ms: LevelStats = Field(default_factory=LevelStats)
    gpu_util_pct: LevelStats = Field(default_factory=LevelStats)
    rps_relative_spread: float | None = None
    """(max − min) / mean."""


class RepeatEntry(Section):
    name: str = ""
    per_node_rps: float | None = None
    per_node_rps_ci: list[float] | None = None
    knee: float | None = None
    decision: str = "observe"
    nodes: int | None = None
    valid_steps: int = 0
    slo_missed_levels: list[float] = Field(default_factory=list)
    """Valid levels whose SLO failed: the SLO gate of a set."""
    decision_complete: bool = True


class SetKnee(Section):
    values: list[float | None] = Field(default_factory=list)
    min: float | None = None
    max: float | None = None
    agree: bool = True
    unit: str | None = None


class RepeatSetSummary(Section):
    """summary.json of a repeat set (`capacity analyze SET`, a folder with `repeats.json`), next to
    each repeat's own summary."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["repeat_set"] = "repeat_set"
    name: str | None = None
    sweep_kind: str | None = None
    run: RunFacts = Field(default_factory=RunFacts)
    """The first repeat's facts + `repeats`: the folder names."""
    slo: SLOConfig = Field(default_factory=SLOConfig)
    verdict_settings: VerdictConfig = Field(default_factory=VerdictConfig)
    repeats: list[RepeatEntry] = Field(default_factory=list)
    levels: list[SetLevel] = Field(default_factory=list)
    capacity: Capacity = Field(default_factory=Capacity)
    knee: SetKnee = Field(default_factory=SetKnee)
    plan: Plan = Field(default_factory=Plan)
    """As a run's, from the set's capacity."""
    verdict: Verdict = Field(default_factory=Verdict)
    """The repeats' common decision, else `observe`, and why."""
    warnings: list[str] = Field(default_factory=list)
    """Each repeat's, prefixed with its name."""
    outcome: Outcome = Field(default_factory=Outcome)
    meta: SummaryMeta = Field(default_factory=SummaryMeta)
    """`results_dir`."""


# Either summary: compare, the gates and the plain answer read both.
AnySummary = Summary | RepeatSetSummary


def summary_from_json(doc: Any, where: str) -> AnySummary:
    """A parsed summary.json: a repeat set's (`kind: repeat_set`) or a run's."""
    if not isinstance(doc, dict) or "capacity" not in doc or ("steps" not in doc and "levels" not in doc):
        raise UserError(f"{where}: not a capacity summary (no steps / capacity keys)")
    if doc.get("kind") == "repeat_set":
        return RepeatSetSummary.from_json(doc, where)
    return Summary.from_json(doc, where)


def load_summary(path: Path) -> AnySummary:
    """summary.json (a file, or the folder holding it)."""
    path = Path(path)
    f = path / SUMMARY_FILE if path.is_dir() else path
    return summary_from_json(read_json(f), str(f))
