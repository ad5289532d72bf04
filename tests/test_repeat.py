"""`capacity run --repeat N`: the whole load N times, one ordinary results folder each, in one set."""

from __future__ import annotations

import json

import pytest
from helpers.processes import capacity
from helpers.results import read_steps, results_dir
from helpers.scenarios import write_scenario

pytestmark = pytest.mark.slow


def test_repeat_writes_a_set_of_complete_runs(tmp_path):
    sc = write_scenario(tmp_path, "rep", target={"url": "embedded", "simulator": {"max_num_seqs": 4}},
                        request={"max_tokens": 8, "timeout_s": 10},
                        load={"levels": [1, 2], "step_s": 3, "warmup_s": 1, "min_requests": 5}, repeat=3)
    r = capacity("run", str(sc), "--repeat", "2", "--no-analyze", timeout=240)  # the flag wins over the file
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    assert json.loads((folder / "repeats.json").read_text())["repeats"] == ["repeat-1", "repeat-2"]
    for name in ("repeat-1", "repeat-2"):
        run = folder / name
        assert [s["level"] for s in read_steps(run)] == [1, 2]
        assert json.loads((run / "meta.json").read_text())["complete"] is True
    assert "[capacity] repeat 2/2" in r.stdout
