"""What the run catalog holds (capacity_plugins/history/) and what `capacity gate --format json` writes.

A `RunEntry` is one analysed run or repeat set as the catalog keeps it (one row of `runs`, its
labels in `run_labels`, its steps in `steps`: docs/history.md has the schema); a `GateResult` is the
non-inferiority judgement of a candidate against a blessed baseline.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from capacity_plugins.contracts.document import Section

GateDecision = Literal["not worse", "worse", "cannot decide"]


class StepEntry(Section):
    """One step of a recorded run: the step table's main columns."""

    step: int = 0
    level: float = 0.0
    rps: float | None = None
    rps_lo: float | None = None
    rps_hi: float | None = None
    goodput_rps: float | None = None
    ttft_p95_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    error_rate: float | None = None
    gpu_util_pct: float | None = None
    slo_pass: bool = False
    valid: bool = False


class RunEntry(Section):
    """One analysed run or repeat set in the catalog."""

    id: int | None = None
    """The catalog's id (null before it is recorded)."""
    kind: Literal["run", "repeat_set"] = "run"
    parent_id: int | None = None
    """The repeat set a repeat belongs to (null for a run on its own and for a set)."""
    results_dir: str = ""
    """The results folder, absolute: the catalog's key (recording it again replaces the entry)."""
    recorded_unix: float | None = None
    started_unix: float | None = None
    scenario: str | None = None
    target: str | None = None
    """The URL the load was sent to, without credentials."""
    model: str | None = None
    engine: str | None = None
    """What served the model, as the server or its metrics said (vllm, tgi, ollama, simulator, ...)."""
    engine_version: str | None = None
    """The version the server reported (`/version`, `/info`, `/api/version`)."""
    dialect: str | None = None
    load_kind: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    """`--label KEY=VALUE` of `capacity run` over the scenario's `labels:` (build id, git sha, config)."""
    capacity_rps: float | None = None
    """Capacity per node under the SLO."""
    capacity_lo: float | None = None
    capacity_hi: float | None = None
    capacity_interval_kind: str | None = None
    """`run_to_run` for a repeat set's t interval over its repeats; else the within-run interval."""
    knee: float | None = None
    knee_unit: str | None = None
    limiting_slo: str | None = None
    slo: dict[str, float | None] = Field(default_factory=dict)
    """The SLO limits the run was judged against."""
    verdict: str | None = None
    decision_complete: bool = True
    valid_steps: int = 0
    repeats: int | None = None
    steps: list[StepEntry] = Field(default_factory=list)


class GateCheck(Section):
    """One judged figure: the candidate's change against the baseline, with the interval of `capacity compare`."""

    metric: str = ""
    higher_is_better: bool = True
    baseline: float | None = None
    candidate: float | None = None
    change: float | None = None
    """Relative: candidate / baseline − 1."""
    change_ci: list[float] | None = None
    """The change ± the noise `capacity compare` says it had to beat, over the baseline value."""
    loss_upper: float | None = None
    """The worst loss the interval allows, relative (a fall for capacity, a rise for a latency)."""
    decision: GateDecision = "cannot decide"
    text: str = ""
    repeats_needed: int | None = None
    """For `cannot decide`: repeats per side that would narrow the interval enough (null: none would, or unknown)."""


class GateResult(Section):
    """`capacity gate`: the candidate judged non-inferior to the baseline, or not."""

    baseline: str = ""
    candidate: str = ""
    margin: float = 0.10
    """A loss within this share of the baseline is not a regression."""
    decision: GateDecision = "cannot decide"
    exit_code: int = 2
    checks: list[GateCheck] = Field(default_factory=list)
    line: str = ""
    """The plain answer: not worse / worse (what, by how much, with the interval) / cannot decide (what would)."""
