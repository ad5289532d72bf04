"""`capacity run` from wherever the user stands: relative paths mean relative to their directory."""

from __future__ import annotations

import pytest
from helpers.processes import capacity
from helpers.scenarios import write_scenario


@pytest.mark.slow
def test_relative_output_from_another_directory(tmp_path):
    # The embedded simulator runs in its own working directory: a relative --output once reached
    # it as a relative truth-log path, and the run failed before the first request.
    work = tmp_path / "elsewhere"
    work.mkdir()
    sc = write_scenario(tmp_path, "rel", target={"url": "embedded"}, request={"max_tokens": 8},
                        load={"levels": [1], "step_s": 2, "warmup_s": 0})
    r = capacity("run", str(sc), "--output", "out", "--no-analyze", timeout=120, cwd=work)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [folder] = (work / "out").iterdir()
    assert (folder / "requests.jsonl").stat().st_size > 0
    assert (folder / "simulator_truth.jsonl").stat().st_size > 0
