"""The order the suite runs in: whole test modules, the longest first (scripts/run_tests.py).

The parallel phase hands whole modules to its workers (`--dist loadfile`: a module's fixtures are
set up once) in collection order (`--no-loadscope-reorder`). Longest first, the last module a
worker picks up is a short one, so the workers finish together instead of one running a long
module alone at the end. tests/durations.json holds seconds per module from a whole run
(`scripts/run_tests.py --store-durations` rewrites it); a module it does not know yet counts as a
median one.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from helpers.paths import TESTS

DURATIONS = TESTS / "durations.json"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_modules_first(items: list[Any], durations: Path = DURATIONS) -> None:
    """Reorder pytest items in place: modules by recorded duration, longest first; within a module,
    the order pytest collected (a stable sort; ties keep their modules' collection order)."""
    known: dict[str, float] = json.loads(durations.read_text()) if durations.exists() else {}
    unknown = statistics.median(known.values()) if known else 0.0
    items.sort(key=lambda item: -known.get(module_of(item.nodeid), unknown))
