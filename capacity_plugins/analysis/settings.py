"""What the analysis judges with: the scenario copy's sections, with the command line's flags on top.

The results folder's `scenario.yaml` is the scenario as run. The analysis reads its `name`,
`load` (kind, `min_requests`, the client-limit thresholds), `target` (for the run facts: the
embedded simulator or a real server), `slo`, `capacity` and `verdict`. Flags override any of
them; the models are the contracts' (contracts/planning.py), so a bad value is one line naming
the section and the field, exactly as `capacity run` would have said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig, VerdictConfig
from capacity_plugins.errors import UserError
from capacity_plugins.kinds.base import DEFAULT_MAX_LOOP_LAG_P99_MS, DEFAULT_MIN_REQUESTS, LoadKind
from capacity_plugins.scenario.files import format_loc
from capacity_plugins.scenario.sections import RequestConfig
from capacity_plugins.scenario.workloads import WorkloadConfig, merged, problems

SCENARIO_FILE = "scenario.yaml"
# The load section's own default (every load kind shares it), not a second copy of the number.
DEFAULT_MAX_SCHEDULE_LAG_P99_MS: float = LoadKind.model_fields["max_schedule_lag_p99_ms"].default
DEFAULT_MAX_CLIENT_CPU_PCT: float = LoadKind.model_fields["max_client_cpu_pct"].default

SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("slo", SLOConfig), ("capacity", CapacityConfig), ("verdict", VerdictConfig))
# Flags that override the `load` section's sample-size and client-limit thresholds.
LOAD_KEYS = ("min_requests", "max_loop_lag_p99_ms", "max_schedule_lag_p99_ms")


@dataclass(frozen=True)
class ClassSettings:
    """A workload class as the analysis judges it: its own SLO over the (overridden) top-level one."""

    name: str
    weight: float
    slo: SLOConfig
    model: str | None = None  # the model (adapter) the class's requests named; None: the run's


@dataclass(frozen=True)
class Settings:
    name: str | None
    load_kind: str | None
    slo: SLOConfig
    capacity: CapacityConfig
    verdict: VerdictConfig
    # Fewer measured requests than this: the step is `insufficient` and decides nothing.
    min_requests: int = DEFAULT_MIN_REQUESTS
    max_loop_lag_p99_ms: float = DEFAULT_MAX_LOOP_LAG_P99_MS
    max_schedule_lag_p99_ms: float = DEFAULT_MAX_SCHEDULE_LAG_P99_MS
    # A generator process above this CPU share is the likely limit (a bottleneck hint).
    max_client_cpu_pct: float = DEFAULT_MAX_CLIENT_CPU_PCT
    # The scenario copy's target section (already redacted by the writer): url, model, dialect.
    target: dict[str, Any] = field(default_factory=dict)
    # Where each value came from, for reasons: "scenario.yaml" or "options".
    source: str = SCENARIO_FILE
    # The scenario copy's load section as written (a trace replay's windows are read from it).
    load: dict[str, Any] = field(default_factory=dict)
    # The scenario copy's request section as written (an embeddings run's batch_size: analysis/items.py).
    request: dict[str, Any] = field(default_factory=dict)
    # The scenario's workload classes (empty: none); each judged by its own SLO.
    workloads: tuple[ClassSettings, ...] = ()


def _read_doc(path: Path) -> dict[str, Any]:
    f = path / SCENARIO_FILE
    if not f.exists():
        return {}
    try:
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{SCENARIO_FILE}{line}: invalid YAML") from None
    if not isinstance(doc, dict):
        raise UserError(f"{SCENARIO_FILE}: expected a mapping at the top level")
    return doc


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key) or {}
    if not isinstance(v, dict):
        raise UserError(f"{SCENARIO_FILE}: {key}: expected a mapping")
    return dict(v)


def _load_number(load: dict[str, Any], key: str, default: float, integer: bool = False) -> Any:
    v = load.get(key, default)
    if v is None:
        return default
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok or v <= 0:
        kind = "an integer" if integer else "a number"
        raise UserError(f"{SCENARIO_FILE}: load.{key}: expected {kind} > 0, got {v!r}")
    return v


def _classes(doc: dict[str, Any], slo: SLOConfig, source: str) -> tuple[ClassSettings, ...]:
    """The copy's `workloads`, each class's SLO merged over `slo` (the top level with flags on top:
    a what-if on the top-level SLO reaches every class that did not set that limit itself)."""
    raw = doc.get("workloads")
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise UserError(f"{source}: workloads: expected a list of classes")
    classes = []
    for i, item in enumerate(raw):
        try:
            classes.append(WorkloadConfig.model_validate(item))
        except ValidationError as e:
            err = e.errors()[0]
            raise UserError(f"{source}: workloads[{i}].{format_loc(tuple(err['loc']))}: {err['msg']}") from None
    try:
        request = RequestConfig.model_validate(_section(doc, "request"))
    except ValidationError:
        request = RequestConfig()  # only `stream` matters to the rules below; a run wrote it valid
    found = problems(classes, request, slo)
    if found is not None:
        raise UserError(f"{source}: {found}")
    return tuple(ClassSettings(w.name, w.weight, merged(slo, w.slo), w.model) for w in classes)


def read_settings(path: Path, overrides: dict[str, Any] | None = None) -> Settings:
    """The scenario copy's sections with `overrides` (flag values; None = not given) on top."""
    doc = _read_doc(Path(path))
    load = doc["load"] if isinstance(doc.get("load"), dict) else {}
    data = {key: _section(doc, key) for key, _ in SECTIONS}
    load_values: dict[str, Any] = {}
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k in LOAD_KEYS:
            load_values[k] = v
            continue
        for key, model in SECTIONS:
            if k in model.model_fields:
                data[key][k] = v
                break
        else:
            raise UserError(f"unknown override {k!r}")
    source = SCENARIO_FILE if doc else "options"
    models: dict[str, Any] = {}
    for key, model in SECTIONS:
        try:
            models[key] = model(**data[key])
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{source}: {key}.{loc}: {err['msg']}") from None
    merged = {**load, **load_values}
    target = doc["target"] if isinstance(doc.get("target"), dict) else {}
    return Settings(
        name=doc.get("name"), load_kind=load.get("kind"), slo=models["slo"], capacity=models["capacity"], load=load,
        verdict=models["verdict"],
        min_requests=int(_load_number(merged, "min_requests", DEFAULT_MIN_REQUESTS, integer=True)),
        max_loop_lag_p99_ms=float(_load_number(merged, "max_loop_lag_p99_ms", DEFAULT_MAX_LOOP_LAG_P99_MS)),
        max_schedule_lag_p99_ms=float(_load_number(merged, "max_schedule_lag_p99_ms", DEFAULT_MAX_SCHEDULE_LAG_P99_MS)),
        max_client_cpu_pct=float(_load_number(merged, "max_client_cpu_pct", DEFAULT_MAX_CLIENT_CPU_PCT)),
        target=dict(target), request=_section(doc, "request"), source=source, workloads=_classes(doc, models["slo"], source),
    )
