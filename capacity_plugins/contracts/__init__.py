"""The contracts between the stages: what one stage writes and another reads, defined once.

| module | owns |
|---|---|
| `records` | `RequestRecord` / `Timings`: every field of requests.jsonl, error kinds, token sources, the metric derivations (TTFT, ITL, TPOT, E2E) and the columns the analysis reads |
| `steps` | `StepRow`: one row of steps.json, its validity fields, and its reader |
| `planning` | `SLOConfig`, `CapacityConfig`: the scenario's `slo` / `capacity` sections, read back by the analysis |
| `percentiles` | the one percentile definition (nearest rank) |
| `folders` | the results-folder rule (one folder per run, never shared) |
| `redaction` | the one redaction marker and the by-value scrub of secrets |
| `dialects` | the dialect names |
| `summary` | `Summary` / `RepeatSetSummary`: every key of summary.json, as the models the analysis builds and every view reads (`load_summary`) |
| `meta` | `Meta`: every key of meta.json, written by the load side, read by the analysis |
| `comparison` | `Comparison`: what `capacity compare --format json` writes |
| `document` | `Section`, the base of those models: keys written only when set, strict JSON (`dumps_json`), one-line load errors |
| `schema_doc` | docs/results-schema.md, generated from those models |

Nothing here imports Locust, gevent, pandas or any stage: every stage may import the contracts,
and the contracts import none of them.
"""

from capacity_plugins.contracts.dialects import DIALECTS
from capacity_plugins.contracts.folders import check_unused, new_results_folder
from capacity_plugins.contracts.percentiles import NUMPY_METHOD, nearest_rank, nearest_rank_index, quantile
from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig
from capacity_plugins.contracts.records import (
    ANALYSIS_COLUMNS,
    ERROR_KINDS,
    RECORD_FIELDS,
    TOKEN_SOURCES,
    RequestRecord,
    Timings,
)
from capacity_plugins.contracts.redaction import REDACTED, Secrets, is_secret_name
from capacity_plugins.contracts.steps import STEP_KINDS, StepKind, StepRow

__all__ = [
    "ANALYSIS_COLUMNS",
    "DIALECTS",
    "ERROR_KINDS",
    "NUMPY_METHOD",
    "RECORD_FIELDS",
    "REDACTED",
    "STEP_KINDS",
    "TOKEN_SOURCES",
    "CapacityConfig",
    "RequestRecord",
    "SLOConfig",
    "Secrets",
    "StepKind",
    "StepRow",
    "Timings",
    "check_unused",
    "is_secret_name",
    "nearest_rank",
    "nearest_rank_index",
    "new_results_folder",
    "quantile",
]
