"""`capacity matrix` end to end: two simulator configurations and one that cannot start.

Why slots-8 must win (docs/simulator.md, closed forms; b = 8 ms, c = 1 ms per running request,
N = 16 output tokens, prompts of ~70 tokens at 20 000 tokens/s ≈ 3.5 ms of prefill each):

- max_num_seqs 2 saturates at X_sat = 2 / (N·(b + 2c) + 2·3.5 ms) ≈ 12 rps, and below
  2 / (N·(b + 2c)) = 12.5 rps whatever the prompts. Past saturation its queue grows by
  Little's law ((U − 2) / X_sat: ~170 ms at 4 users), over the 100 ms TTFT limit, so its
  capacity under the SLO is at most its saturated throughput.
- max_num_seqs 8 at 4 users is below its knee: no queue (TTFT ≈ one decode step and a prefill,
  ~20 ms) and, by the lower bound 4 / ((N + 1)·(b + 4c) + 4·3.5 ms) ≈ 18 rps, more throughput
  than the 2-slot server can ever give.

Same GPU count and price, so the per-cost ranking is the capacity ranking. Service jitter spreads
the fixed-length requests' lock-step bursts, as in test_e2e_capacity.py.
"""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.paths import ROOT
from helpers.processes import capacity, processes_with
from helpers.results import read_meta, read_steps
from helpers.scenarios import write_scenario

from capacity_plugins.simulator.config import SimConfig

pytestmark = [pytest.mark.slow, pytest.mark.measured]

N_TOKENS, PRICE, TTFT_LIMIT_MS = 16, 2.0, 100.0
JITTER = "--service-jitter-cv 0.2"


def test_two_configurations_and_a_broken_one(tmp_path):
    sc = write_scenario(
        tmp_path, "sweep",
        # a closed port: the run must use each entry's URL (capacity run --target-url), never this one
        target={"url": "http://127.0.0.1:9"},
        corpus={"path": "synthetic:prompt_tokens=64,output_tokens=16,n=2000,seed=3", "min_distinct": 1000},
        request={"max_tokens": N_TOKENS, "ignore_eos": True, "timeout_s": 20},
        # the test machine is loaded (2 shared cores): generator validity is tested elsewhere
        load={"kind": "concurrency_sweep", "levels": [1, 2, 4, 8, 16], "step_s": 4, "warmup_s": 1,
              "max_loop_lag_p99_ms": 200},
        slo={"ttft_p95_ms": TTFT_LIMIT_MS, "tpot_p95_ms": None},
        capacity={"gpu_hour_usd": PRICE},
    )
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({"name": "slots", "scenario": sc.name, "output": str(tmp_path / "out"), "entries": [
        {"name": "slots-2", "command": f"capacity simulate --port {{port}} --max-num-seqs 2 {JITTER}", "gpus": 1},
        {"name": "broken", "command": "echo 'no such model' >&2; exit 3"},
        {"name": "slots-8", "command": f"capacity simulate --port {{port}} --max-num-seqs 8 {JITTER}", "gpus": 1},
    ]}, sort_keys=False))
    r = capacity("matrix", str(matrix), timeout=400)
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-3000:]  # broken failed; the others ran

    [root] = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    doc = json.loads((root / "matrix.json").read_text())
    rows = {row["name"]: row for row in doc["entries"]}
    assert list(rows) == ["slots-2", "broken", "slots-8"]
    assert rows["broken"]["status"] == "failed" and "exited with code 3" in rows["broken"]["reason"]
    assert doc["failed"] == ["broken"]
    two, eight = rows["slots-2"], rows["slots-8"]
    for row in (two, eight):
        assert row["status"] == "ok", row
        run = root / row["run_dir"]
        assert [s["level"] for s in read_steps(run)] == [1, 2, 4, 8, 16]
        assert read_meta(run)["target"] == row["url"] != "http://127.0.0.1:9"  # the entry's server was loaded
        assert (run / "summary.json").exists() and (root / row["report"]).exists()
        assert row["gpus"] == 1 and row["gpu_hour_usd"] == PRICE
        assert row["ttft_p95_ms"] is not None and row["ttft_p95_ms"] <= TTFT_LIMIT_MS  # the SLO load passed
        # cost per 1M output tokens = GPUs × price / tokens per hour at the capacity (exactly N per request)
        assert row["cost_per_1m_output_tokens_usd"] == pytest.approx(
            PRICE / 3600 / (row["capacity_rps"] * N_TOKENS) * 1e6, rel=1e-6)
        assert row["score"] == pytest.approx(row["capacity_rps"] * 3600 / PRICE)

    d = SimConfig()
    x_sat_2 = 2 / (N_TOKENS * (d.decode_base_ms + 2 * d.decode_per_seq_ms) / 1000)  # 12.5 rps, prefill ignored
    assert two["capacity_rps"] <= 1.2 * x_sat_2, two  # window edges: whole steps in a 3 s window
    assert eight["capacity_rps"] > two["capacity_rps"]
    best = doc["best"]
    assert best["name"] == "slots-8" and best["runner_up"] == "slots-2" and best["basis"] == "requests per USD"
    assert eight["rank"] == 1 and two["rank"] == 2 and rows["broken"]["rank"] is None
    # separable exactly when the winner's interval lies above the runner-up's
    assert best["separable"] == (eight["score_ci"][0] > (two["score_ci"][1] or float("inf")))
    assert ("not separable" in best["statement"]) != best["separable"]

    md = (root / "matrix.md").read_text()
    assert f"**Best: {best['statement']}**" in md and "| broken | – | failed |" in md
    assert "slots-8" in (root / "matrix.html").read_text()
    for entry in ("slots-2", "broken", "slots-8"):
        assert (root / entry / "server.log").exists()
    assert processes_with(JITTER) == []  # both simulators were stopped
    # each analysed entry is in the run history beside the matrix folder, labelled with its entry
    listed = capacity("history", "list", "--label", "matrix=slots", "--history", str(tmp_path / "out" / "history.sqlite"))
    assert listed.returncode == 0, listed.stderr
    for entry in ("slots-2", "slots-8"):
        assert str((root / rows[entry]["run_dir"]).resolve()) in listed.stdout, listed.stdout
        assert f"matrix_entry={entry}" in listed.stdout


def test_shipped_example_names_files_that_exist():
    doc = yaml.safe_load((ROOT / "scenarios" / "matrix-simulator.yaml").read_text())
    assert (ROOT / "scenarios" / doc["scenario"]).is_file()
    assert all("{port}" in e["command"] for e in doc["entries"])
