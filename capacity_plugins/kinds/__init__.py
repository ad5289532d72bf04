"""Load kinds: what a scenario's `load: {kind: ...}` runs — one module per kind.

| kind | module | loop | steps |
|---|---|---|---|
| `concurrency_sweep` | `concurrency_sweep.py` | closed (users send back to back) | one per level of users |
| `rate_sweep` | `rate_sweep.py` | open (arrivals on a schedule) | one per level of requests/s |
| `peak` | `peak.py` | open (`target_rps`) or closed (`users`) | one: ramp, then hold |
| `capacity_search` | `capacity_search.py` | closed (users) or open (rps) | chosen as it goes: bracketing, then bisection, until the SLO's boundary is found |
| `cache_probe` | `cache_probe.py` | closed (users) or open (rps) | two per level, back to back: the corpus's distinct prompts, then a cache arm built from them |
| `trace` | `trace.py` | open (the trace's own arrivals) | one per `window_s` of trace time |
| `agentic` | `agentic.py` | closed (each user walks whole sessions: model calls, tool waits) | one per level of concurrent sessions |

Each module holds the kind's scenario model and its behaviour (`base.py`: `LoadKind`, its hooks,
the registry). A new kind is a module here, registered with `@LoadKind.register("name")`, and its
name in `BUILTIN`; the scenario's `load:` union, its errors and every caller follow from the registry.
What it adds to the summary and the reports (`capacity_search`: `search`, `cache_probe`: `cache_probe`,
`trace`: `trace`, `agentic`: `agentic`) is the section its `summary_section` names, registered in analysis/sections.py and
outputs/sections.py.
"""

from __future__ import annotations

import importlib

from capacity_plugins.kinds.base import (
    LoadKind,
    NextSteps,
    OpenLoop,
    StepPlan,
    find,
    get,
    names,
    unknown,
)

# The built-in kinds, each a module of this package, in the order the scenario's errors list them.
BUILTIN = ("concurrency_sweep", "rate_sweep", "peak", "capacity_search", "cache_probe", "trace", "agentic")
# The kind of a `load` section without `kind:`.
DEFAULT = "concurrency_sweep"

for _module in BUILTIN:
    importlib.import_module(f"{__name__}.{_module}")


def default_load() -> LoadKind:
    """The `load` section of a scenario that has none."""
    return get(DEFAULT).model_validate({})


def models() -> tuple[type[LoadKind], ...]:
    """Every registered kind's model: the members of the scenario's `load` union."""
    return tuple(LoadKind.registered().values())


__all__ = ["BUILTIN", "DEFAULT", "LoadKind", "default_load", "NextSteps", "OpenLoop", "StepPlan", "find", "get", "models", "names",
           "unknown"]
