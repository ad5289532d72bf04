"""Read a results folder into `RunData`, what every analysis step works on (no Locust, no gevent).

steps.json through `contracts.steps.StepRow`, the scenario copy's sections with the command
line's overrides (analysis/settings.py), meta.json, telemetry_series.csv, and the records through
analysis/records.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from capacity_plugins.analysis.gaps import Gaps, by_step
from capacity_plugins.analysis.records import (
    STEP_DTYPE,
    read_columnar,
    read_itl_side,
    read_requests,
)
from capacity_plugins.analysis.settings import Settings, read_settings
from capacity_plugins.analysis.step_records import FrameRecords, Records
from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
from capacity_plugins.contracts.meta import META_FILE, Meta
from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig, VerdictConfig
from capacity_plugins.contracts.steps import STEPS_FILE, StepRow
from capacity_plugins.errors import UserError

# One row of steps.json (the load side writes it, the analysis reads it: one definition).
Step = StepRow


@dataclass
class RunData:
    """Everything the analysis reads, loaded once."""

    path: Path
    # one row per attempt, REQUEST_COLUMNS (request_id only where the JSONL was read), step by step
    # (`records.steps()`): the whole run at once only where a consumer needs it (step_records.py)
    records: Records
    itl: dict[int, Gaps]  # step index → the ITL gaps (ms) of its measured, successful requests
    steps: list[Step]
    meta: Meta  # meta.json (empty when the folder has none)
    name: str | None
    load_kind: str | None
    settings: Settings
    telemetry: pd.DataFrame | None  # telemetry_series.csv, or None
    warnings: list[str] = field(default_factory=list)
    # Lines of requests.jsonl that were skipped (a last line cut by a crash).
    torn_lines: int = 0
    # What the step consumers gathered on the analysis's walk over the steps' records, by name
    # (step_records.py `gathered`): the report's box-plot samples, a section's per-step figures
    gathered: dict[str, Any] = field(default_factory=dict)

    @property
    def requests(self) -> pd.DataFrame:
        """Every record at once: the whole run's columns in memory (step_records.py says who needs that)."""
        return self.records.frame()

    @property
    def slo(self) -> SLOConfig:
        return self.settings.slo

    @property
    def capacity(self) -> CapacityConfig:
        return self.settings.capacity

    @property
    def verdict(self) -> VerdictConfig:
        return self.settings.verdict


# ---------------------------------------------------------------- small file readers


def _read_json_file(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise UserError(f"{path.name}: invalid JSON ({e})") from None
    except OSError as e:
        raise UserError(f"{path.name}: cannot read ({e.strerror})") from None


def read_steps(path: Path) -> list[Step]:
    f = path / STEPS_FILE
    if not f.exists():
        raise UserError(f"{f}: missing (a results folder needs {STEPS_FILE})")
    doc = _read_json_file(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise UserError(f"{f.name}: expected an object with a 'steps' list")
    out = []
    for i, raw in enumerate(doc["steps"]):
        if isinstance(raw, dict) and "index" not in raw:
            raw = {**raw, "index": i}
        out.append(StepRow.from_json(raw, f"{STEPS_FILE}: steps[{i}]"))
    return out


def load_run(path: Path, overrides: dict | None = None, progress=None) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: not a results folder (no such directory)")
    say = progress or (lambda _msg: None)
    warnings: list[str] = []
    steps = read_steps(path)
    settings = read_settings(path, overrides)

    meta = Meta()
    if (path / META_FILE).exists():
        doc = _read_json_file(path / META_FILE)
        if not isinstance(doc, dict):
            raise UserError("meta.json: expected a JSON object")
        meta = Meta.from_json(doc, META_FILE)
    else:
        warnings.append("meta.json missing: provenance (versions, model, GPU) unknown")
    # The load side writes `complete: false` (+ `incomplete_reason`); older folders and synthetic
    # ones may say `incomplete: true`. Both mean the same here (and the summary's meta says so).
    if meta.complete is False:
        meta.incomplete = True

    side = (path / "itl.parquet").exists() or (path / "itl.jsonl").exists()
    f = path / RECORDS_FILE
    indexes = [st.index for st in steps]
    columnar = None if side else read_columnar(path, indexes)
    itl: dict[int, Gaps]
    torn = False
    if columnar is not None:
        records: Records = columnar.records
        itl, torn = columnar.itl, columnar.torn
        tail = f"; its last {columnar.jsonl_tail:,} records, not in the copy, from the JSONL" if columnar.jsonl_tail else ""
        say(f"read {COLUMNAR_FILE} (the typed copy of {RECORDS_FILE}, {f.stat().st_size / 1e6:.0f} MB){tail}")
    else:
        say(f"reading {f.name} ({f.stat().st_size / 1e6:.0f} MB)" if f.exists() else f"reading {RECORDS_FILE}")
        req, vals, lens, torn = read_requests(f, with_itl=not side)
        if side:
            got = read_itl_side(path, req)
            assert got is not None
            vals, itl_steps, good = got
            if not bool(good.all()):
                vals, itl_steps = vals[good], itl_steps[good]
        else:
            assert vals is not None and lens is not None
            good_req = req["ok"].to_numpy() & ~req["warmup"].to_numpy()
            step_req = np.where(good_req, req["step"].to_numpy(), -1).astype(STEP_DTYPE)
            itl_steps = np.repeat(step_req, lens)
        itl = by_step(vals, itl_steps, indexes)
        records = FrameRecords(req)
    say(f"read {records.count:,} request records")
    if torn:
        warnings.append("requests.jsonl: its last line was cut (a crash mid-write?): 1 line skipped, "
                        "the records before it are analysed")

    telemetry = None
    tf = path / "telemetry_series.csv"
    if tf.exists():
        try:
            telemetry = pd.read_csv(tf, usecols=lambda c: c in {"unix", "step", "host", "device", "series", "value", "unit"})
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
            raise UserError(f"telemetry_series.csv: cannot parse ({str(e).splitlines()[0]})") from None
        missing = {"unix", "series", "value"} - set(telemetry.columns)
        if missing:
            raise UserError(f"telemetry_series.csv: missing column(s) {', '.join(sorted(missing))}")
        telemetry["value"] = pd.to_numeric(telemetry["value"], errors="coerce")
        telemetry["unix"] = pd.to_numeric(telemetry["unix"], errors="coerce")
        if "step" in telemetry.columns:
            telemetry["step"] = pd.to_numeric(telemetry["step"], errors="coerce")
    return RunData(
        path=path, records=records, itl=itl,
        steps=steps, meta=meta, name=settings.name, load_kind=settings.load_kind, settings=settings,
        telemetry=telemetry, warnings=warnings, torn_lines=int(torn),
    )


__all__ = ["RunData", "Step", "load_run", "read_steps"]
