"""What the catalog keeps of an analysed run or repeat set, and recording results folders into it.

A run's entry comes from its summary.json (analysed in memory when a folder has none: `capacity
history add` imports old folders as they are); a repeat set is recorded as one entry (its capacity
the repeats' mean with the run-to-run interval) and each repeat as its own entry under it. Labels:
the run's own (meta.json `labels`: the scenario's `labels:` under `capacity run --label`), then the
ones given to `capacity history add --label`, which win.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capacity_plugins.analysis.compare import load_summary
from capacity_plugins.analysis.repeats import is_repeat_set, read_repeats
from capacity_plugins.contracts.history import RunEntry, StepEntry
from capacity_plugins.contracts.summary import AnySummary, RepeatSetSummary, SummaryMeta
from capacity_plugins.errors import UserError
from capacity_plugins.history.catalog import Catalog
from capacity_plugins.scenario.model import parse_labels

__all__ = ["engine_of", "entry_of", "parse_labels", "record_analysed", "record_folder"]

# the probe path a server answers its version on, by dialect family (rehearsal/meta.py probe_server)
VERSION_KEYS = {"tgi": "info", "ollama": "api_version"}
GPU_KINDS = {"dcgm", "nvml", "gpu-agent"}


def engine_of(meta: SummaryMeta, dialect: str | None, simulated: bool) -> tuple[str | None, str | None]:
    """(engine, version) as the server said: the kind its metrics were scraped as (vllm, tgi, sglang,
    simulator, ...), else `simulator` for the embedded one, else the dialect's family (tgi, ollama,
    triton; an OpenAI-compatible server is `openai-compatible`: its API does not name its engine);
    the version from the endpoint that family answers (rehearsal/meta.py probe_server)."""
    family = (dialect or "").split("-")[0] or None
    kinds = [k for k in meta.server_kinds() if k not in GPU_KINDS]
    engine = kinds[0] if kinds else "simulator" if simulated else \
        ("openai-compatible" if family == "openai" else family)
    server = meta.server if isinstance(meta.server, dict) else {}
    probe = server.get(VERSION_KEYS.get(family or "", "version"))
    version = probe.get("version") if isinstance(probe, dict) else None
    return engine, (str(version) if version is not None else None)


def entry_of(summary: AnySummary, folder: Path, labels: dict[str, str]) -> RunEntry:
    """The catalog's entry for one analysed run or repeat set."""
    cap, run = summary.capacity, summary.run
    lo, hi = _ends(cap.per_node_rps_ci)
    meta = summary.meta
    engine, version = engine_of(meta, run.dialect or meta.dialect, run.simulated)
    if isinstance(summary, RepeatSetSummary):
        knee = summary.knee.min
        knee_unit = summary.knee.unit
        steps = [StepEntry(step=i + 1, level=e.level, rps=e.rps.mean, rps_lo=_ends(e.rps.ci)[0],
                           rps_hi=_ends(e.rps.ci)[1], goodput_rps=e.goodput_rps.mean,
                           ttft_p95_ms=e.ttft_p95_ms.mean, e2e_p50_ms=e.e2e_p50_ms.mean, e2e_p99_ms=e.e2e_p99_ms.mean,
                           gpu_util_pct=e.gpu_util_pct.mean, valid=bool(e.valid_repeats),
                           slo_pass=bool(e.valid_repeats) and not any(e.level in r.slo_missed_levels
                                                                      for r in summary.repeats))
                 for i, e in enumerate(summary.levels)]
        valid, repeats = sum(1 for e in summary.levels if e.valid_repeats), len(summary.repeats)
    else:
        knee, knee_unit = summary.knee.value, summary.knee.unit
        steps = [StepEntry(step=r.step, level=r.level, rps=r.rps, rps_lo=_ends(r.rps_ci)[0],
                           rps_hi=_ends(r.rps_ci)[1], goodput_rps=r.goodput_rps, ttft_p95_ms=r.ttft_p95_ms,
                           e2e_p50_ms=r.e2e_p50_ms, e2e_p99_ms=r.e2e_p99_ms, error_rate=r.error_rate,
                           gpu_util_pct=r.gpu_util_pct, slo_pass=r.slo_pass, valid=r.valid) for r in summary.steps]
        valid, repeats = sum(1 for r in summary.steps if r.valid), None
    slo: dict[str, float | None] = {k: _num(v) for k, v in summary.slo.model_dump().items() if _num(v) is not None}
    return RunEntry(
        kind="repeat_set" if isinstance(summary, RepeatSetSummary) else "run", results_dir=str(Path(folder).resolve()), started_unix=_num(run.start_unix or meta.start_unix),
        scenario=summary.name or run.scenario, target=run.target, model=run.model or meta.model, engine=engine,
        engine_version=version, dialect=run.dialect or meta.dialect, load_kind=run.load_kind,
        labels={**(meta.labels or {}), **labels}, capacity_rps=cap.per_node_rps, capacity_lo=lo, capacity_hi=hi,
        capacity_interval_kind=cap.interval_kind or ("within_run" if cap.per_node_rps_ci else None),
        knee=knee, knee_unit=knee_unit, limiting_slo=cap.limiting_slo, slo=slo, verdict=summary.verdict.decision,
        decision_complete=summary.outcome.decision_complete, valid_steps=valid, repeats=repeats, steps=steps)


def _ends(ci: Sequence[float | None] | None) -> tuple[float | None, float | None]:
    """An interval's two ends (None where it has none)."""
    return (ci[0], ci[1]) if ci and len(ci) == 2 else (None, None)


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def record_folder(catalog: Catalog, folder: Path, labels: dict[str, str] | None = None,
                  summary: AnySummary | None = None) -> list[RunEntry]:
    """Record one results folder or repeat set (and its repeats); the entries written, the set first."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: not a results folder")
    summary = summary or load_summary(folder)
    entry = entry_of(summary, folder, labels or {})
    repeats = [(r, load_summary(r)) for r in read_repeats(folder)] \
        if isinstance(summary, RepeatSetSummary) and is_repeat_set(folder) else []
    children = [entry_of(sub, r, {**entry.labels, **(labels or {})}) for r, sub in repeats]
    if children:  # the set's summary keeps no server facts: its repeats' (one server, one engine)
        entry.engine, entry.engine_version = children[0].engine, children[0].engine_version
        entry.target, entry.model = entry.target or children[0].target, entry.model or children[0].model
    catalog.record(entry, summary.dumps())
    for child, (_, sub) in zip(children, repeats, strict=True):
        child.parent_id = entry.id
        catalog.record(child, sub.dumps())
    return [entry, *children]


def record_analysed(folder: Path, where: str, labels: dict[str, str] | None = None) -> tuple[bool, str]:
    """Record a folder `capacity run`, `capacity analyze` or a `capacity matrix` entry has just
    analysed (with `labels` over its own): (recorded, the one line to say). Never raises: whatever
    the catalog did, the run is done and analysed, and its exit code stays its own (`capacity
    history add FOLDER` is the retry the line names)."""
    later = f"later: capacity history add {folder}"
    try:
        with Catalog(where) as catalog:
            entries = record_folder(catalog, folder, labels)
            return True, f"recorded as run {entries[0].id} in {catalog.name}"
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        return False, f"not recorded ({text}); {later}"
