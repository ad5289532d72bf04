"""Workload classes inside a generator process: which class the next request is, its prompt and settings.

The scenario's `workloads:` (scenario/workloads.py) become one `WorkloadLane` per class: its shard of
its own corpus, the run's request settings with the class's overrides, and the request name the
live stats show it under. Classes with the same corpus settings share one sampler, so two classes
never send the same prompt (a repeat would hit the server's prefix cache).

Which lane a request takes is a seeded weighted draw, one random stream per (corpus seed, worker,
step): a rerun draws the same classes in the same order in every step, whatever happened in the
steps before, and a worker draws exactly as the master's `Setup` says (it needs no scenario file).
In closed loop the *sent* requests follow the weights; a slow class then holds more of the users,
as it would hold more of a real server's connections.

The master (or the local runner) makes the `WorkloadSpec`s from its scenario; only the keys a class
set travel, so the run's options — the scenario's top-level sections with any flag on top — stay
every class's defaults on every process.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capacity_plugins.client.lane import WorkloadLane
from capacity_plugins.corpus.images import synthetic_images
from capacity_plugins.dialects import RequestParams
from capacity_plugins.errors import UserError

if TYPE_CHECKING:
    from capacity_plugins.contracts.options import LLMOptions
    from capacity_plugins.corpus import Corpus, Sample, Sampler
    from capacity_plugins.rehearsal.source import RequestSource
    from capacity_plugins.scenario import Scenario


@dataclass(frozen=True)
class WorkloadSpec:
    """One class as the master sends it (msgpack-safe): only the keys the class itself set."""

    name: str
    weight: float
    corpus: dict[str, Any] = field(default_factory=dict)  # path (absolute), min_distinct, sampling, seed
    request: dict[str, Any] = field(default_factory=dict)  # scenario.workloads.CLASS_REQUEST_KEYS, and `model`
    sha256: str | None = None  # the class's corpus as the master loaded it (None: not checked)

    def to_message(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_message(cls, d: dict[str, Any]) -> WorkloadSpec:
        return cls(name=str(d["name"]), weight=float(d["weight"]), corpus=dict(d.get("corpus") or {}),
                   request=dict(d.get("request") or {}), sha256=d.get("sha256"))

    def corpus_settings(self, options: LLMOptions) -> tuple[str, int, str, int]:
        """(source, min_distinct, sampling, seed): the class's keys over the run's options."""
        c = self.corpus
        return (str(c.get("path", options.corpus)), int(c.get("min_distinct", options.min_distinct)),
                str(c.get("sampling", options.sampling)), int(c.get("seed", options.seed)))


def specs_from_scenario(scenario: Scenario) -> list[WorkloadSpec]:
    out = []
    for w in scenario.workloads or ():
        corpus = w.corpus.model_dump(exclude_unset=True)
        path = scenario.class_corpus_path(w)
        if path is not None:
            corpus["path"] = path
        request = w.request.model_dump(exclude_unset=True)
        if w.model is not None:
            request["model"] = w.model  # a RequestParams field like the others: the lane sends it
        out.append(WorkloadSpec(name=w.name, weight=w.weight, corpus=corpus, request=request))
    return out


class WorkloadMix:
    """The lanes of one process and its seeded draw among them (see the module doc)."""

    def __init__(self, lanes: list[WorkloadLane], *, seed: int, worker: int) -> None:
        if not lanes:
            raise ValueError("a workload mix needs at least one class")
        self.lanes = lanes
        self.seed = seed
        self.worker = worker
        cum, total = [], 0.0
        for lane in lanes:
            total += lane.weight
            cum.append(total)
        self._cum = cum
        self._total = total
        self._step: int | None = None
        self._rng: random.Random | None = None

    def draw(self, step: int | None) -> WorkloadLane:
        if self._rng is None or step != self._step:
            self._step = step
            self._rng = random.Random(f"workloads:{self.seed}:{self.worker}:{step}")
        i = bisect.bisect_right(self._cum, self._rng.random() * self._total)
        return self.lanes[min(i, len(self.lanes) - 1)]

    def next(self, step: int | None) -> tuple[Sample, WorkloadLane]:
        lane = self.draw(step)
        return lane.sampler.next(), lane


class ClassCorpora:
    """The corpora classes name, loaded once per process (a load can take seconds)."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, int], Corpus] = {}

    def get(self, spec: WorkloadSpec, options: LLMOptions, run_corpus: Corpus | None) -> Corpus:
        source, min_distinct, _, _ = spec.corpus_settings(options)
        if run_corpus is not None and (source, min_distinct) == (options.corpus, options.min_distinct):
            return run_corpus
        key = (source, min_distinct)
        if key not in self._loaded:
            from capacity_plugins.corpus import load_corpus
            from capacity_plugins.swarm.handshake import in_thread

            try:
                # in gevent's thread pool, as the run's corpus (handshake.load_corpus): a worker
                # reading a class's corpus at setup must not hold its hub and miss heartbeats
                self._loaded[key] = in_thread(load_corpus, source, min_distinct=min_distinct)
            except UserError as e:
                raise UserError(f"workload {spec.name}: corpus: {e}") from None
        return self._loaded[key]


def with_hashes(specs: list[WorkloadSpec], corpora: ClassCorpora, options: LLMOptions,
                run_corpus: Corpus | None) -> list[WorkloadSpec]:
    """The specs with the hash of each class's corpus, for the workers to check theirs against."""
    return [dataclasses.replace(s, sha256=corpora.get(s, options, run_corpus).sha256) for s in specs]


def build_mix(specs: list[WorkloadSpec], options: LLMOptions, params: RequestParams, corpora: ClassCorpora,
              run_corpus: Corpus | None, *, shard_index: int, shard_count: int) -> WorkloadMix:
    """This process's lanes; UserError when a class's corpus cannot be loaded or differs from the master's."""
    samplers: dict[tuple[str, str, int], Sampler] = {}
    lanes = []
    for spec in specs:
        source, _, sampling, seed = spec.corpus_settings(options)
        corpus = corpora.get(spec, options, run_corpus)
        if spec.sha256 is not None and corpus.sha256 != spec.sha256:
            raise UserError(f"workload {spec.name}: corpus {source!r} has sha256 {corpus.sha256[:12]}… but the "
                            f"master's has {spec.sha256[:12]}…; copy the master's corpus file to this host")
        key = (source, sampling, seed)
        if key not in samplers:
            samplers[key] = corpus.sampler(sampling, seed, shard_index, shard_count)
        lane_params = dataclasses.replace(params, **spec.request)
        synthetic_images(lane_params.images, lane_params.image_size)  # made now, not in the first request
        lanes.append(WorkloadLane(name=spec.name, weight=spec.weight,
                                  params=lane_params,
                                  sampler=samplers[key], request_name=f"{options.dialect}:{spec.name}"))
    return WorkloadMix(lanes, seed=options.seed, worker=shard_index)


def prepare(source: RequestSource, scenario: Scenario | None, options: LLMOptions) -> None:
    """On the master or the local runner, at start and at every test start (the web UI may have
    changed the run's corpus, every class's default): the classes' specs with their corpus hashes
    (`provenance` is what meta.json records of them). Loads the classes' corpora (UserError when
    one is bad)."""
    if scenario is None or not scenario.workloads:
        source.workload_specs = []
        return
    if source.class_corpora is None:
        source.class_corpora = ClassCorpora()
    source.workload_specs = with_hashes(specs_from_scenario(scenario), source.class_corpora, options, source.corpus)


def apply(source: RequestSource, specs: list[WorkloadSpec], options: LLMOptions, params: RequestParams) -> None:
    """This process's mix from `specs` (none: no classes) for its shard; UserError when a class's
    corpus is bad."""
    if not specs:
        source.workloads = None
        return
    if source.class_corpora is None:
        source.class_corpora = ClassCorpora()
    source.workloads = build_mix(specs, options, params, source.class_corpora, source.corpus,
                                 shard_index=source.worker_index, shard_count=source.worker_count)


def provenance(specs: list[WorkloadSpec], options: LLMOptions) -> list[dict[str, Any]]:
    """What meta.json records of the classes: name, weight, corpus source and hash, request overrides."""
    return [{"name": s.name, "weight": s.weight, "corpus": s.corpus_settings(options)[0], "sha256": s.sha256,
             "request": dict(s.request)} for s in specs]
