"""Writing the inputs of a run: scenario files and prompt corpora."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# Test sweeps run steps of a few seconds: they ask for a handful of measured requests per step
# (the product's default, 100, is for real decisions; the analysis says how wide the intervals are).
TEST_MIN_REQUESTS = 10


def write_scenario(tmp_path: Path, name: str = "t", **sections: Any) -> Path:
    """A scenario file; `output` defaults to tmp_path/results, the corpus to a small builtin one,
    `load.min_requests` to TEST_MIN_REQUESTS unless the test sets it."""
    data: dict[str, Any] = {"name": name, "output": str(tmp_path / "results")}
    data["corpus"] = {"min_distinct": 10}
    data.update(sections)
    if isinstance(data.get("load"), dict):
        data["load"] = {"min_requests": TEST_MIN_REQUESTS, **data["load"]}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def write_corpus(path: Path, n: int = 1200) -> Path:
    """A JSONL corpus of n distinct prompts with ids."""
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"p{i}", "prompt": f"question number {i}: say something"}) + "\n")
    return path


def llm_args(url: str, results: Path, *, model: str = "sim-model") -> list[str]:
    """The plugin's Locust options for a short run against the simulator (a synthetic corpus)."""
    return ["--host", url, "--model", model, "--max-tokens", "16",
            "--corpus", "synthetic:prompt_tokens=40,output_tokens=16,n=1500", "--results-dir", str(results)]


def write_yaml(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    """A scenario file with exactly this text (for the parser's own tests)."""
    p = tmp_path / name
    p.write_text(text)
    return p


def scenario_error(tmp_path: Path, text: str) -> str:
    """The one-line UserError `load_scenario` gives for this text (fails if none, or several lines)."""
    import pytest

    from capacity_plugins.errors import UserError
    from capacity_plugins.scenario import load_scenario

    with pytest.raises(UserError) as e:
        load_scenario(write_yaml(tmp_path, text))
    msg = str(e.value)
    assert "\n" not in msg
    return msg
