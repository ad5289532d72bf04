"""The results-folder rule: every run writes its own folder, and two runs never share one.

`<parent>/<name>-<YYYYmmdd-HHMMSS>`, with `-2`, `-3`, … when two runs start in the same second.
`capacity run`, a plain `locust` run, and each test started from the web UI all name their
folders through `new_results_folder`; an explicit folder that already holds records is refused
(`check_unused`) rather than appended to, so one requests.jsonl never mixes two runs.
"""

from __future__ import annotations

import time
from pathlib import Path

from capacity_plugins.errors import UserError

# Plain `locust` runs without a scenario name their folders `results/run-<stamp>`.
DEFAULT_PARENT = Path("results")
DEFAULT_NAME = "run"
RECORDS_FILE = "requests.jsonl"
# The analysis's columns of RECORDS_FILE, typed (sinks/columnar.py writes it, analysis/records.py reads it).
COLUMNAR_FILE = "requests.arrow"


def new_results_folder(parent: str | Path, name: str, *, now: float | None = None) -> Path:
    """A folder path that does not exist yet (not created here)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = Path(parent) / f"{name}-{stamp}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def check_unused(folder: str | Path, flag: str = "--results-dir") -> None:
    """UserError when `folder` already holds another run's records."""
    records = Path(folder) / RECORDS_FILE
    if records.exists() and records.stat().st_size > 0:
        raise UserError(
            f"{flag} {folder}: already holds {RECORDS_FILE} from another run; give a new folder "
            "(two runs' records must not mix)"
        )
