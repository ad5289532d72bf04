"""The product's answer end to end: a real sweep against the simulator, analysed.

The simulator batches at most 8 sequences, so throughput must stop rising after 8 users: the
knee is 8, and the plan must follow from the measured capacity by the documented formula.
Fixed prompt/output lengths (synthetic corpus, ignore_eos) make service times deterministic,
so the knee does not depend on which prompts a short step happened to draw.
"""

from __future__ import annotations

import json
import math

import pytest
from helpers.processes import capacity
from helpers.results import read_steps, results_dir
from helpers.scenarios import write_scenario

pytestmark = [pytest.mark.slow, pytest.mark.measured]


def test_sweep_knee_at_max_num_seqs_and_plan_follows_from_capacity(tmp_path):
    peak, safety, redundancy, gpus_per_node = 40.0, 1.5, 1, 2
    sc = write_scenario(
        tmp_path,
        "knee",
        # Fixed lengths with no service noise put users in lock-step: completions come in bursts of
        # 8, and a step's throughput then swings by whole bursts (the analysis' throughput interval
        # rightly calls such steps indistinguishable). A little service-time jitter, as every real
        # server has, spreads the bursts; the knee is still where the batch is full.
        target={"url": "embedded", "simulator": {"max_num_seqs": 8, "service_jitter_cv": 0.2}},
        corpus={"path": "synthetic:prompt_tokens=64,output_tokens=8,n=2000,seed=3", "min_distinct": 1000},
        request={"max_tokens": 8, "ignore_eos": True, "timeout_s": 20},
        # the test machine is loaded (CI, 2 cores, other tests): the generator's own validity is
        # tested elsewhere (test_starvation.py); this one is about the knee and the plan
        load={"kind": "concurrency_sweep", "levels": [1, 2, 4, 8, 16, 32], "step_s": 12, "warmup_s": 2,
              "min_requests": 50, "max_loop_lag_p99_ms": 200},
        slo={"ttft_p95_ms": 400, "tpot_p95_ms": None},
        capacity={"peak_qps": peak, "safety_factor": safety, "redundancy": redundancy,
                  "current_nodes": 1, "gpus_per_node": gpus_per_node, "gpu_hour_usd": 2.0},
    )
    r = capacity("run", str(sc), timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    assert [s["level"] for s in read_steps(folder)] == [1, 2, 4, 8, 16, 32]
    summary = json.loads((folder / "summary.json").read_text())

    knee = summary["knee"]
    assert knee["value"] == 8 and knee["unit"] == "users", knee
    assert knee["bracket"] == [8, 16], knee
    # below the knee, more users bring proportionally more throughput (the batch fills up)
    rps = {row["level"]: row["achieved_rps"] for row in summary["steps"]}
    assert rps[8] > 1.25 * rps[4] and rps[4] > 1.4 * rps[2]
    assert rps[16] < 1.1 * rps[8] and rps[32] < 1.1 * rps[8]

    # Capacity is read off each step's ok rps (successful requests *sent* in the window), not off
    # achieved_rps (completions *in* the window): the two differ by the requests straddling the
    # window's edges, ~1 % here, so bound it by the column it comes from.
    ok_rps = [row["rps"] for row in summary["steps"]]
    cap = summary["capacity"]["per_node_rps"]
    assert cap and cap <= max(ok_rps) * 1.001, (cap, ok_rps)
    plan = summary["plan"]
    nodes = math.ceil(peak * safety / cap) + redundancy
    assert plan["nodes"] == nodes and plan["gpus"] == nodes * gpus_per_node, (plan, cap)
    assert summary["verdict"]["decision"] in ("scale", "dont_scale_yet", "observe")
    assert (folder / "report.html").exists() and (folder / "summary.md").exists()
