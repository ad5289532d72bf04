"""Where things are: the repository, the tests folder and the tests' data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"
ARTIFACTS = ROOT / "test-artifacts"
