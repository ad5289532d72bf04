"""The two telemetry files (docs/results.md), appended and flushed as rows arrive.

telemetry.csv:        unix, step, source, metric, labels (JSON object), value   — raw samples
telemetry_series.csv: unix, step, host, device, series, value, unit              — normalised
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

RAW_FILE = "telemetry.csv"
SERIES_FILE = "telemetry_series.csv"
RAW_COLUMNS = ("unix", "step", "source", "metric", "labels", "value")
SERIES_COLUMNS = ("unix", "step", "host", "device", "series", "value", "unit")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if value == value else "nan"
    return value


class AppendCsv:
    """A CSV file opened for append; the header is written only when the file is new or empty."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.path = path
        self.columns = columns
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists() or path.stat().st_size == 0
        self._fh: TextIO | None = path.open("a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._fh)
        if new:
            self._writer.writerow(columns)
            self._fh.flush()

    def write(self, rows: Iterable[dict[str, Any]]) -> int:
        if self._fh is None:
            return 0
        n = 0
        for row in rows:
            self._writer.writerow([_cell(row.get(c)) for c in self.columns])
            n += 1
        self._fh.flush()
        return n

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def labels_json(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def write_series_csv(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Append normalised rows to a telemetry_series.csv (used by PromQL mode)."""
    out = AppendCsv(path, SERIES_COLUMNS)
    try:
        return out.write(rows)
    finally:
        out.close()
