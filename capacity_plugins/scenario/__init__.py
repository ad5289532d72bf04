"""The YAML scenario: one file describes one capacity rehearsal.

`load_scenario(path)` reads, expands `${VAR}` references, validates and returns a frozen
`Scenario`; every problem is one `UserError` line naming the file and the field path. The `slo`
and `capacity` sections are the contracts' planning models (contracts/planning.py), so the
results folder's scenario copy is exactly what `capacity analyze` reads back.

| module | owns |
|---|---|
| `sections` | target, corpus, request, telemetry |
| `loads` | the `load` section: the union of the registered load kinds (`capacity_plugins/kinds/`) |
| `workloads` | `workloads:`: request classes, the key-by-key merge over the top-level sections |
| `model` | `Scenario`: the sections, derived values, the redacted copy |
| `files` | YAML, `${VAR}`, validation errors, `load_scenario` |

No Locust import here: the runner, the analysis and the tests read scenarios without gevent.
"""

from capacity_plugins.kinds.cache_probe import CacheProbeLoad
from capacity_plugins.kinds.capacity_search import CapacitySearchLoad
from capacity_plugins.kinds.concurrency_sweep import ConcurrencySweepLoad
from capacity_plugins.kinds.peak import PeakLoad
from capacity_plugins.kinds.rate_sweep import RateSweepLoad
from capacity_plugins.kinds.trace import TraceLoad
from capacity_plugins.scenario.files import format_loc, load_scenario, parse_scenario
from capacity_plugins.scenario.loads import LoadConfig
from capacity_plugins.scenario.model import Scenario
from capacity_plugins.scenario.sections import (
    BUILTIN_PREFIXES,
    EMBEDDED,
    CorpusConfig,
    RequestConfig,
    ScrapeTarget,
    TargetConfig,
    TelemetryConfig,
)
from capacity_plugins.scenario.workloads import WorkloadClass, WorkloadConfig

__all__ = [
    "BUILTIN_PREFIXES",
    "CacheProbeLoad",
    "CapacitySearchLoad",
    "EMBEDDED",
    "ConcurrencySweepLoad",
    "CorpusConfig",
    "LoadConfig",
    "PeakLoad",
    "RateSweepLoad",
    "RequestConfig",
    "Scenario",
    "ScrapeTarget",
    "TargetConfig",
    "TraceLoad",
    "TelemetryConfig",
    "WorkloadClass",
    "WorkloadConfig",
    "format_loc",
    "load_scenario",
    "parse_scenario",
]
