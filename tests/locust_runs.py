"""Helpers to run real `locust` processes on loopback and read what they wrote (tests only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from capacity_plugins.contracts.percentiles import quantile

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).with_name("locust"))
LOCUSTFILE = str(ROOT / "locustfiles" / "llm.py")


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_locust(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LOCUST, "-f", LOCUSTFILE, *args], cwd=ROOT, env=env or env_with(), capture_output=True, text=True,
        timeout=timeout,
    )


def records(results_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (results_dir / "requests.jsonl").read_text().splitlines() if x.strip()]


def locust_request_count(json_file_stem: Path) -> tuple[int, int]:
    """(requests, failures) from Locust's own --json-file output."""
    entries = json.loads(Path(str(json_file_stem) + ".json").read_text())
    return sum(e["num_requests"] for e in entries), sum(e["num_failures"] for e in entries)


def nearest_rank(values: list[float], q: float) -> float:
    """The product's own definition (contracts), on unsorted values."""
    return quantile(values, q)  # type: ignore[return-value]


def llm_stats_rows(results_dir: Path) -> dict[tuple[str, str], dict[str, str]]:
    import csv

    with (results_dir / "llm_stats.csv").open() as f:
        return {(r["name"], r["metric"]): r for r in csv.DictReader(f)}
