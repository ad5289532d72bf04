"""The scenario's `workloads:` — request classes, each with its own prompts, request settings and SLO.

Real traffic is a mix: short chat turns judged on TTFT, long RAG prompts that may take longer to
start, batch summaries nobody watches stream. One SLO for all of them is either too loose for chat
or fails on RAG. A class names its share of the requests (`weight`) and overrides the top-level
`corpus`, `request` and `slo` sections **key by key**: the top-level sections are every class's
defaults, so a class writes only what differs.

A class's sections are kept as written (`model_fields_set`), not merged, so the results folder's
scenario copy shows what the class itself set and `capacity analyze --ttft-p95-ms …` (which moves
the top-level SLO) still reaches every class that did not set its own limit. `merged()` applies the
rule wherever a whole section is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, field_serializer, model_serializer

from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.scenario.sections import CorpusConfig, RequestConfig, _Strict

# What a class may change of the request: what the server generates and how it is asked for.
# The rest (timeout, usage, tokenizer, retries) is how the client measures, one setting per run.
CLASS_REQUEST_KEYS = ("max_tokens", "stream", "temperature", "top_p", "ignore_eos", "images", "image_size")
# The SLO limits a class can be judged on. ITL is judged over a step's pooled chunk gaps, which the
# analysis does not keep per request, so it cannot be split by class (TPOT is the per-request view).
CLASS_LIMITS = ("ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms")

M = TypeVar("M", bound=BaseModel)


class WorkloadConfig(_Strict):
    """One entry of `workloads:`."""

    # Names the class in records (`workload`), live stats and the report.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    # Relative share of the requests (weights need not sum to 1): a request is this class with
    # probability weight / sum of weights.
    weight: float = Field(default=1.0, gt=0)
    # The model this class's requests name (a LoRA adapter, or another model behind the same
    # endpoint); None: the run's (target.model). Each class then has its own latency and capacity,
    # so a mix of adapters is judged per adapter and limited by the first to miss its SLO.
    model: str | None = Field(default=None, min_length=1)
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    request: RequestConfig = Field(default_factory=RequestConfig)
    slo: SLOConfig = Field(default_factory=SLOConfig)

    @field_serializer("corpus", "request", "slo")
    def _as_written(self, section: BaseModel) -> dict[str, Any]:
        # Only the keys the class set: the rest is the top-level section's (see the module doc).
        out: dict[str, Any] = section.model_dump(mode="json", exclude_unset=True)
        return out

    @model_serializer(mode="wrap")
    def _without_default_model(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A class that names no model is written as before `model` existed (the run's model).
        out: dict[str, Any] = handler(self)
        if out.get("model") is None:
            out.pop("model", None)
        return out


def merged(top: M, override: BaseModel) -> M:
    """`top` with the keys `override` set replaced (the key-by-key rule)."""
    return type(top).model_validate({**top.model_dump(), **override.model_dump(exclude_unset=True)})


@dataclass(frozen=True)
class WorkloadClass:
    """One class with its sections merged over the top-level ones: what it actually runs with."""

    name: str
    weight: float
    corpus: CorpusConfig
    request: RequestConfig
    slo: SLOConfig
    model: str | None = None


def resolve(w: WorkloadConfig, corpus: CorpusConfig, request: RequestConfig, slo: SLOConfig) -> WorkloadClass:
    return WorkloadClass(name=w.name, weight=w.weight, corpus=merged(corpus, w.corpus),
                         request=merged(request, w.request), slo=merged(slo, w.slo), model=w.model)


def problems(workloads: list[WorkloadConfig], request: RequestConfig, top_slo: SLOConfig) -> str | None:
    """The first rule the classes break, as `field.path: why` (None: they are fine)."""
    seen: dict[str, int] = {}
    for i, w in enumerate(workloads):
        where = f"workloads[{i}]"
        if w.name in seen:
            return f"{where}.name: duplicate class name {w.name!r} (also workloads[{seen[w.name]}])"
        seen[w.name] = i
        run_wide = sorted(w.request.model_fields_set - set(CLASS_REQUEST_KEYS))
        if run_wide:
            return (f"{where}.request.{run_wide[0]}: applies to the whole run, not to one class "
                    f"(set it in the top-level request section; a class may set {', '.join(CLASS_REQUEST_KEYS)})")
        slo = merged(top_slo, w.slo)
        if slo.itl_p95_ms is not None:
            key = f"{where}.slo.itl_p95_ms" if "itl_p95_ms" in w.slo.model_fields_set else "slo.itl_p95_ms"
            return (f"{key}: not judged per workload class (chunk gaps are pooled per step, not kept per "
                    "class); use tpot_p95_ms")
        if not merged(request, w.request).stream:
            streamed = [k for k in ("ttft_p95_ms", "tpot_p95_ms") if getattr(slo, k) is not None]
            if streamed:
                # Without a stream there is no first token: every request would count as over.
                return (f"{where}.slo.{streamed[0]}: class {w.name!r} does not stream (request.stream: false), "
                        f"so it has no TTFT or TPOT; set {streamed[0]}: null and judge it on e2e_p95_ms")
        if all(getattr(slo, k) is None for k in CLASS_LIMITS):
            return (f"{where}.slo: no latency limit for class {w.name!r} (ttft_p95_ms, tpot_p95_ms or "
                    "e2e_p95_ms, here or in the top-level slo): each class is judged by its own SLO")
    return None

