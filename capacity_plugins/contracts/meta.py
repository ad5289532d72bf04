"""meta.json: what was run, against what, with which tools, and what its own accounting says.

The load side writes it at the end of a run (web UI: when each test stops): the plugin's facts
(`plugin.py` `meta()`) with what the rehearsal, the swarm and the live view add while the run goes
(the search's bracket, the cache arm, the workload classes, telemetry provenance, lost workers).
`capacity analyze` reads it back with `Meta.load` and copies a part of it into summary.json's
`meta`. Keys are sorted on disk; every key is written only when its producer set it (a results
folder from a synthetic test, or an older version, may hold only a few), except `schema_version`.

Secrets never reach it: the options go through `redacted_options`, the headers through
`redact_headers`, and the whole document through the run's `Secrets.scrub_obj` before it is saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson
from pydantic import Field

from capacity_plugins.contracts.document import Number, Section

# 1: the first versioned meta.json (files without the key are the same content, written before it).
META_SCHEMA_VERSION = 1
META_FILE = "meta.json"


class LostWorker(Section):
    """A worker the master lost (stopped sending heartbeats, or stopped without its final record
    batch). A worker recorded by index alone (`[3]` in an older file) reads as `{"worker": 3}`."""

    SOMETIMES = frozenset({"worker", "client_id", "lost_unix", "reason"})
    worker: int | str | None = None
    """The worker's index (the order it joined in)."""
    client_id: str | None = None
    """Locust's id of the worker's process."""
    lost_unix: Number | None = None
    """When it was lost; null: unknown (it was stopped before its final record batch)."""
    reason: str | None = None


class Workers(Section):
    """The generator processes of the run."""

    SOMETIMES = frozenset({"count", "indices", "workers_lost"})
    count: int | None = None
    indices: list[int] = Field(default_factory=list)
    workers_lost: list[Any] | None = None
    """Older files kept the lost workers here instead of at the top level."""


class WorkerRecords(Section):
    """One worker's record accounting (distributed runs)."""

    SOMETIMES = frozenset({"received", "produced_reported", "final_batch", "lost"})
    received: int | None = None
    produced_reported: int | None = None
    final_batch: bool | None = None
    lost: int | None = None
    """null: it stopped without its final batch, so what it made after its last report is unknown."""


class Records(Section):
    """The record accounting: what the generators finished, what reached requests.jsonl, what was lost."""

    SOMETIMES = frozenset({"written", "produced", "received", "produced_reported", "lost", "by_worker", "note",
                           "lost_reason"})
    written: int | None = None
    produced: int | None = None
    """A local run: requests the generator finished."""
    received: int | None = None
    """A distributed run: records the master received."""
    produced_reported: int | None = None
    """A distributed run: what the workers said they finished."""
    lost: int | float | None = None
    """Records lost by the writer; null: unknown (a worker stopped without its final batch)."""
    by_worker: dict[str, WorkerRecords] = Field(default_factory=dict)
    note: str | None = None
    lost_reason: str | None = None


class TelemetryTarget(Section):
    """One scraped target's provenance (telemetry/collector.py)."""

    SOMETIMES = frozenset({"kind", "info"})
    kind: str | None = None
    """The scrape kind: `vllm`, `dcgm`, `gpu-agent`, `simulator`, …"""
    info: dict[str, Any] | None = None
    """Info metrics the server exports, e.g. vLLM's `vllm:cache_config_info` labels."""


class TelemetryProvenance(Section):
    SOMETIMES = frozenset({"targets", "nvml", "gpu_models", "served_models"})
    targets: dict[str, Any] = Field(default_factory=dict)
    """Per scraped URL: kind, GPU models and count, served models, server settings (`TelemetryTarget`)."""
    nvml: dict[str, Any] | None = None
    """NVML host, driver and GPUs, or why NVML was unavailable."""
    gpu_models: list[Any] = Field(default_factory=list)
    served_models: list[Any] = Field(default_factory=list)

    def target_list(self) -> list[TelemetryTarget]:
        """The targets that describe themselves (an entry that is not an object is skipped)."""
        return [TelemetryTarget.model_validate(t) for t in self.targets.values() if isinstance(t, dict)]


class Telemetry(Section):
    SOMETIMES = frozenset({"provenance", "gaps"})
    provenance: TelemetryProvenance = Field(default_factory=TelemetryProvenance)
    gaps: list[Any] = Field(default_factory=list)
    """The last 50 scrape failures: url, time, reason."""


class SearchStep(Section):
    SOMETIMES = frozenset({"level", "judgement", "limiting"})
    level: Number | None = None
    judgement: str | None = None
    """`pass`, `fail` or `uncertain`."""
    limiting: str | None = None
    """What failed or could not be told (with workload classes: the class, `chat.ttft_p95_ms`)."""


class Search(Section):
    """A capacity search's account (rehearsal/search.py), written by the load side into meta.json
    and steps.json and copied into summary.json unchanged."""

    SOMETIMES = frozenset({"highest_pass", "lowest_fail", "bracket", "converged", "stopped", "unit", "tolerance",
                           "steps"})
    highest_pass: Number | None = None
    """The level the SLO held at; null: none."""
    lowest_fail: Number | None = None
    """The lowest level it failed or could not be told at; null: none."""
    bracket: list[Number | None] | None = None
    """`[highest_pass, lowest_fail]`."""
    converged: bool | None = None
    """The bracket is within `tolerance` or one user wide."""
    stopped: str | None = None
    """Why the search ended: converged, noise, time budget, max_level held, lowest level failed."""
    unit: str | None = None
    """`users` or `rps`."""
    tolerance: Number | None = None
    steps: list[SearchStep] = Field(default_factory=list)
    """In the order measured."""


class CacheArm(Section):
    """A prefix-cache probe's cache arm (corpus/cache_arms.py): how it was built and, estimated from
    the corpus, what it shares."""

    SOMETIMES = frozenset({"arm", "prefix_tokens", "pool_size", "seed", "tag", "shared_tokens_mean",
                           "prompt_tokens_mean", "full_prefix_share", "pool"})
    arm: str | None = None
    """`shared_prefix` or `repeat`."""
    prefix_tokens: int | None = None
    pool_size: int | None = None
    seed: int | None = None
    tag: str | None = None
    """The line its prompts begin with."""
    shared_tokens_mean: float | None = None
    """shared_prefix: estimated tokens each prompt shares with the others."""
    prompt_tokens_mean: float | None = None
    """shared_prefix: estimated prompt tokens."""
    full_prefix_share: float | None = None
    """shared_prefix: share of prompts that carry the whole prefix."""
    pool: int | None = None
    """repeat: the prompts sent in turn."""


class Meta(Section):
    """meta.json (module doc). Every key is written only when set, except `schema_version`."""

    SOMETIMES: ClassVar[frozenset[str]] = frozenset()  # set below: every field but schema_version
    schema_version: int = META_SCHEMA_VERSION
    """1 (files written before the key existed hold the same content)."""
    tool: str | None = None
    """`capacity-plugins`."""
    versions: dict[str, str | None] = Field(default_factory=dict)
    """capacity-plugins, Locust, gevent, geventhttpclient, orjson, numpy, pandas, Python and platform versions."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Every Locust and plugin option of the run, secrets redacted."""
    extra_headers: dict[str, Any] = Field(default_factory=dict)
    """The extra request headers, credential-like values redacted."""
    dialect: str | None = None
    model: str | None = None
    target: str | None = None
    """The URL the load was sent to."""
    simulated: bool | None = None
    """The target was the embedded simulator: every server and GPU reading is simulated."""
    server: Any = None
    """What the server said about itself (`/v1/models`, `/version`, `/info`, `/api/version`, `/api/tags`)."""
    corpus: dict[str, Any] | None = None
    """`source`, `sha256`, `samples`."""
    seed: int | None = None
    sampling: str | None = None
    start_unix: Number | None = None
    end_unix: Number | None = None
    role: str | None = None
    """`local` or `master`."""
    workers: Workers | None = None
    records: Records | None = None
    refusals: list[Any] = Field(default_factory=list)
    """Workers that refused to run (corpus mismatch, bad options)."""
    token_counting: dict[str, Any] | None = None
    """How output tokens were counted when the server's usage and the chunks disagree (client/tokens.py)."""
    scenario: str | None = None
    """The scenario's name."""
    load_kind: str | None = None
    steps_planned: int | None = None
    steps_run: int | None = None
    complete: bool | None = None
    """False when the run was interrupted, Locust failed, or a worker was lost."""
    incomplete_reason: str | None = None
    workloads: list[dict[str, Any]] | None = None
    """With the scenario's `workloads:` only: per class `name`, `weight`, `corpus` (its source),
    `sha256` (of its corpus) and `request` (the class's request overrides)."""
    search: Search | None = None
    """A capacity search's bracket and path (docs/scenario.md)."""
    cache_probe: CacheArm | None = None
    """A prefix-cache probe's cache arm."""
    telemetry: Telemetry | None = None
    """`provenance` (per target: kind, GPU models and count, served models, server settings such as
    vLLM's `cache_config_info`; NVML host, driver and GPUs, or why NVML was unavailable) and `gaps`."""
    workers_lost: list[Any] | None = None
    """Workers that stopped sending heartbeats or their final record batch (`LostWorker`) and never came back."""
    workers_rejoined: list[Any] | None = None
    """Workers the master lost during the run that came back under the same identity (`worker`,
    `client_id`, `lost_unix`, `rejoined_unix`, `reason`): the steps they missed are invalid (and
    re-run), the run is not incomplete for them."""
    reruns: list[Any] | None = None
    """Steps run again because a change of the swarm invalidated them: `step` (the re-run's index),
    `rerun_of` (the invalid step's), `level`, `reason` (load.max_reruns)."""
    clock: dict[str, Any] | None = None
    """Each worker's clock offset to the master's (`offsets`: per worker `offset_s`, `uncertainty_s`,
    `samples`), the bound (`max_uncertainty_s`), and `flagged` (workers whose offset is unknown or
    too uncertain); records and steps are on the master's clock (swarm/clock.py)."""
    labels: dict[str, str] | None = None
    """The scenario's `labels:` under `capacity run --label KEY=VALUE` (build id, git sha, config): how
    the run catalog (docs/history.md) groups runs."""
    # Read, never written by this version: older and synthetic folders.
    incomplete: bool | None = None
    """Older folders: true instead of `complete: false` (the analysis reads both)."""
    lost_records: int | None = None
    """Older folders: the records lost, before `records.lost`."""
    gpu: Any = None
    gpus: Any = None
    gpu_names: Any = None

    def lost_workers(self) -> list[LostWorker]:
        """The lost workers: top-level `workers_lost` (what the master writes), else `workers.workers_lost`."""
        lost = self.workers_lost
        if not lost and self.workers is not None:
            lost = self.workers.workers_lost
        if not isinstance(lost, list):
            return []
        return [LostWorker.model_validate(w if isinstance(w, dict) else {"worker": w}) for w in lost]

    @property
    def is_incomplete(self) -> bool:
        """The run did not finish (`complete: false`, or an older folder's `incomplete: true`)."""
        return self.complete is False or bool(self.incomplete)

    def records_lost(self) -> int | float | None:
        """Records the writer lost, as far as the file says (None: not said, or unknown)."""
        if self.records is not None and self.records.lost:
            return self.records.lost
        return self.lost_records

    def server_kinds(self) -> list[str]:
        """The scraped targets' kinds, sorted (GPU exporters included)."""
        if self.telemetry is None:
            return []
        return sorted({str(t.kind) for t in self.telemetry.provenance.target_list() if t.kind})

    def target_infos(self) -> list[dict[str, Any]]:
        """Each scraped target's info metrics."""
        if self.telemetry is None:
            return []
        return [t.info or {} for t in self.telemetry.provenance.target_list()]

    def update_from(self, other: Meta) -> None:
        """Take every key `other` set (what the rehearsal, the swarm and the live view added): it wins."""
        for name in other.model_fields_set:
            setattr(self, name, getattr(other, name))

    def write(self, path: Path) -> None:
        """meta.json as the load side writes it: keys sorted, atomically (a reader never sees half)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str))
        tmp.replace(path)


Meta.SOMETIMES = frozenset(Meta.model_fields) - {"schema_version"}
