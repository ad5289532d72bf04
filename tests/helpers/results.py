"""Reading what a run wrote: a results folder (docs/results.md), Locust's own files, `capacity` output."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any


def read_records(folder: Path) -> list[dict[str, Any]]:
    """requests.jsonl, one dict per line (blank lines skipped)."""
    with (folder / "requests.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def read_steps(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / "steps.json").read_text())["steps"]


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "meta.json").read_text())


def llm_stats_rows(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    """llm_stats.csv keyed by (name, metric)."""
    with (folder / "llm_stats.csv").open() as f:
        return {(r["name"], r["metric"]): r for r in csv.DictReader(f)}


def count_lines(path: Path) -> int:
    """Non-blank lines of a JSONL file; 0 when it does not exist yet."""
    if not path.exists():
        return 0
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def records_by_worker(jsonl: Path, finished_only: bool = False) -> dict[int, int]:
    """Records per worker index in a requests.jsonl (its path: it may be read while a run writes it);
    `finished_only` leaves out requests cancelled by a stop (which the live statistics do not count)."""
    counts: Counter[int] = Counter()
    for line in jsonl.read_bytes().splitlines():
        if line.strip():
            rec = json.loads(line)
            if finished_only and rec.get("error_kind") == "cancelled":
                continue
            counts[int(rec["worker"])] += 1
    return dict(counts)


def locust_request_count(json_file_stem: Path) -> tuple[int, int]:
    """(requests, failures) from Locust's own --json-file output."""
    entries = json.loads(Path(str(json_file_stem) + ".json").read_text())
    return sum(e["num_requests"] for e in entries), sum(e["num_failures"] for e in entries)


def results_dir(stdout: str) -> Path:
    """The folder `capacity run` printed last ('[capacity] results: PATH')."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("[capacity] results: "):
            return Path(line.split(": ", 1)[1].split(" (")[0])
    raise AssertionError(f"no results line in output:\n{stdout[-2000:]}")


def only_folder(parent: Path) -> Path:
    """The one folder under `parent` (a run's <name>-<timestamp>)."""
    folders = [p for p in parent.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def llm_row(doc: dict[str, Any], name: str = "Aggregated") -> dict[str, Any]:
    """One row of /llm/stats (the Aggregated one unless named)."""
    return next(r for r in doc["rows"] if r["name"] == name)


def llm_tab(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's rows in Locust's /stats/requests document."""
    return next(e for e in doc["extended_stats"] if e["key"] == "llm")["data"]
