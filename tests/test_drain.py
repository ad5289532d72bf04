"""No request starts after a step's measured window closes: the drain only lets in-flight requests
finish (they are recorded), so the next step starts on an idle server and no request belongs to a
window it was not sent in."""

from __future__ import annotations

import pytest
from helpers.processes import capacity
from helpers.results import read_records, read_steps, results_dir
from helpers.scenarios import write_scenario

pytestmark = [pytest.mark.slow, pytest.mark.background]  # waits on its processes, asserts no timing: beside the measured tests (tests/README.md)

SIM = {"url": "embedded", "simulator": {"max_num_seqs": 2}}
# The clock is the same on one host; a send decided just before the end may be stamped just after.
SLACK_S = 0.05


def _late_sends(folder) -> list[tuple[int, float]]:
    ends = {s["index"]: s["end_unix"] for s in read_steps(folder)}
    return [(r["step"], r["sent_unix"] - ends[r["step"]]) for r in read_records(folder)
            if r["step"] is not None and r["sent_unix"] > ends[r["step"]] + SLACK_S]


@pytest.mark.parametrize("load", [
    # closed loop: long requests, so users are mid-request when the window closes
    {"kind": "concurrency_sweep", "levels": [3, 6], "step_s": 5, "warmup_s": 1, "min_requests": 1},
    # open loop past a small pool: arrivals queue behind busy users (cap hits) when the window closes
    {"kind": "rate_sweep", "levels": [4, 8], "step_s": 5, "warmup_s": 1, "max_concurrency": 3, "min_requests": 1},
], ids=["closed", "open"])
def test_no_request_starts_during_a_drain(tmp_path, load):
    sc = write_scenario(tmp_path, "drain", target=SIM, request={"max_tokens": 150, "timeout_s": 30}, load=load)
    r = capacity("run", str(sc), "--no-analyze", timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    recs = read_records(folder)
    assert any(r["error_kind"] is None for r in recs)
    assert _late_sends(folder) == []
    # the long requests really were in flight at the window's end: the drain had work to do
    steps = read_steps(folder)
    assert any(
        r["sent_unix"] < s["end_unix"] < r["sent_unix"] + r["e2e_ms"] / 1000.0 for s in steps for r in recs
        if r["step"] == s["index"]
    )
