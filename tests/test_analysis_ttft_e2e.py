"""Where TTFT goes, end to end: a real sweep against the embedded simulator past its batch slots,
analysed, and every number of the breakdown checked against the simulator's truth log (the same
clock readings its histograms observed) and the closed forms of docs/simulator.md.

The simulator has S slots; the sweep runs 1, S and 4·S closed-loop users. Past the slots, U − S
requests wait for a slot, so TTFT is mostly queue: Q / (Q + T_join), T_join the step a request
joins in (its decode plus the prefill of 1..S joiners). Fixed lengths (synthetic corpus,
ignore_eos) make T_join's bounds exact.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import Counter

import pytest
from helpers.processes import capacity
from helpers.results import read_records, read_steps, results_dir
from helpers.scenarios import write_scenario

from capacity_plugins.contracts.planning import VerdictConfig
from capacity_plugins.simulator.truth import read_truth

pytestmark = [pytest.mark.slow, pytest.mark.measured]

S, BASE_MS, PER_SEQ_MS, RATE, N = 4, 10.0, 2.0, 10000.0, 20  # slots, decode step, prefill tokens/s, output
LEVELS = [1, S, 4 * S]
LAG = "simulator_step_lag_seconds_total"


def _near(values: list[float]) -> float:
    """How far a window mean may sit from the truth's: one request more or fewer at each edge (the
    collector stamps a scrape just before the server renders it, so a request finishing in between
    can fall on either side)."""
    return 2 * (max(values) - min(values)) / max(len(values) - 2, 1) + 1e-6


def _lag_between(folder, a: float, b: float) -> float:
    """The simulated time the host took from the engine between two scrapes (docs/simulator.md)."""
    with (folder / "telemetry.csv").open(newline="") as fh:
        lag = {float(r["unix"]): float(r["value"]) for r in csv.DictReader(fh) if r["metric"] == LAG}
    return lag[b] - lag[a]


def test_sweep_past_the_slots_ttft_breakdown_matches_the_truth_log(tmp_path):
    x_sat_ms = N * (BASE_MS + PER_SEQ_MS * S) / S  # ms per request at saturation, before prefill
    sc = write_scenario(
        tmp_path, "ttft",
        target={"url": "embedded", "simulator": {"max_num_seqs": S, "decode_base_ms": BASE_MS,
                                                 "decode_per_seq_ms": PER_SEQ_MS, "prefill_tokens_per_s": RATE}},
        corpus={"path": f"synthetic:prompt_tokens=94,output_tokens={N},n=2000,seed=3", "min_distinct": 1000},
        request={"max_tokens": N, "ignore_eos": True, "timeout_s": 30},
        # the test machine is shared: the generator's own validity is tested elsewhere
        load={"kind": "concurrency_sweep", "levels": LEVELS, "step_s": 10, "warmup_s": 3, "max_loop_lag_p99_ms": 200},
        # fails past the slots only: half the queue 3·S users build there, well above T_join below them
        slo={"ttft_p95_ms": (LEVELS[-1] - S) * x_sat_ms / 2, "tpot_p95_ms": None},
    )
    r = capacity("run", str(sc), timeout=240)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    summary = json.loads((folder / "summary.json").read_text())
    truth = read_truth(folder / "simulator_truth.jsonl")
    by_id = {t["id"]: t for t in truth}
    records = read_records(folder)
    steps = read_steps(folder)
    rows = {row["level"]: row for row in summary["steps"]}
    assert sorted(rows) == LEVELS and all(row["valid"] for row in rows.values())
    assert summary["ttft_breakdown"]["notes"] == []  # the simulator exports every part

    for row in rows.values():
        a, b = row["ttft_window_unix"]
        assert steps[row["step"]]["warmup_end_unix"] <= a < b <= steps[row["step"]]["end_unix"]  # inside the window
        # -- the server's means are the truth's over the requests between the same scrapes ------
        done = [t for t in truth if t["e2e_s"] is not None and a < t["arrival_unix"] + t["e2e_s"] <= b]
        first = [t for t in truth if t["queue_s"] is not None and t["prefill_s"] is not None
                 and a < t["arrival_unix"] + t["queue_s"] + t["prefill_s"] <= b]
        for key, values in (("server_queue_mean_ms", [t["queue_s"] * 1000 for t in done]),
                            ("server_prefill_mean_ms", [t["prefill_s"] * 1000 for t in done]),
                            ("server_ttft_mean_ms", [(t["queue_s"] + t["prefill_s"]) * 1000 for t in first])):
            assert abs(row[key] - statistics.mean(values)) <= _near(values), (row["level"], key)
        # -- the remainder: what each request's client TTFT adds to the server's own ------------
        seen = [x for x in records if x["step"] == row["step"] and x["ttft_ms"] is not None
                and a < x["sent_unix"] + x["ttft_ms"] / 1000 <= b]
        added = [x["ttft_ms"] - (by_id[x["response_id"]]["queue_s"] + by_id[x["response_id"]]["prefill_s"]) * 1000
                 for x in seen]
        assert min(added) > 0  # no client sees a token before the server made it
        # The same requests on all three sides: the client's, the truth's between the scrape times, and
        # the server's histograms between the same scrapes. The last can differ from the truth's by a
        # request observed at a scrape's edge (a scrape's time is the collector's, taken a moment off
        # the server's snapshot; on a loaded host more), which its mean shows.
        server_same = row["server_ttft_mean_ms"] == pytest.approx(
            statistics.mean((t["queue_s"] + t["prefill_s"]) * 1000 for t in first), abs=1e-6)
        if {x["response_id"] for x in seen} == {t["id"] for t in first} and server_same:
            assert row["client_remainder_ms"] == pytest.approx(statistics.mean(added), abs=1e-6)
            assert row["client_remainder_ms"] > 0
        else:
            ttfts = [x["ttft_ms"] for x in seen]
            assert abs(row["client_remainder_ms"] - statistics.mean(added)) <= _near(ttfts)
        # small: loopback plus how late the generator's loop read the token
        assert row["client_remainder_ms"] < 1.0 + row["loop_lag_p99_ms"], row

    # -- past the slots: TTFT is mostly queue, as the truth log and the closed form say --------------
    past = rows[LEVELS[-1]]
    a, b = past["ttft_window_unix"]
    done = [t for t in truth if t["e2e_s"] is not None and a < t["arrival_unix"] + t["e2e_s"] <= b]
    first = [t for t in truth if t["queue_s"] is not None and a < t["arrival_unix"] + t["queue_s"] + t["prefill_s"] <= b]
    q_truth = statistics.mean(t["queue_s"] for t in done)
    ttft_truth = statistics.mean(t["queue_s"] + t["prefill_s"] for t in first)
    rel = (_near([t["queue_s"] for t in done]) / q_truth
           + _near([t["queue_s"] + t["prefill_s"] for t in first]) / ttft_truth)
    assert past["ttft_queue_share"] == pytest.approx(q_truth / ttft_truth, rel=rel)
    assert past["ttft_queue_share_basis"] == "server_ttft"

    p = Counter(t["prompt_tokens"] for t in done).most_common(1)[0][0]  # as the server counts it
    step = (BASE_MS + PER_SEQ_MS * S) / 1000
    join_lo, join_hi = step + p / RATE, step + S * p / RATE + 0.001 + _lag_between(folder, a, b)
    prefill, queue = past["server_prefill_mean_ms"] / 1000, past["server_queue_mean_ms"] / 1000
    assert join_lo <= prefill <= join_hi, (prefill, join_lo, join_hi)
    # Q = (U − S)/X − g with g ≥ 0, X at least the step's throughput interval's low end
    assert queue <= (LEVELS[-1] - S) / past["rps_ci"][0] + step + S * p / RATE
    share = past["ttft_queue_share"]
    assert queue / (queue + join_hi) <= share * (1 + rel) and share <= queue / (queue + join_lo) * (1 + rel)
    assert share > 0.8

    # -- the verdict says so, naming the level and its threshold ---------------------------------
    vc = VerdictConfig()
    assert share >= vc.queue_dominant_share
    queue_reasons = [x for x in summary["verdict"]["reasons"] if x.startswith("TTFT is")]
    assert queue_reasons == [f"TTFT is {share * 100:.0f} % queue at {LEVELS[-1]} users (the server queue takes "
                             f"{queue * 1000:.0f} ms of the server's TTFT {past['server_ttft_mean_ms']:.0f} ms on "
                             "average): add replicas or batch slots, not faster GPUs."]
    assert {"key": "verdict.queue_dominant_share", "value": vc.queue_dominant_share,
            "meaning": "share of TTFT spent in the server queue at which queueing dominates"} \
        in summary["verdict"]["settings"]
    html = (folder / "report.html").read_text()
    assert "Where TTFT goes" in html and (folder / "ttft_breakdown.png").exists()

    # -- the thresholds are flags: a stricter remainder limit and a laxer queue share flip both --
    # the verdict names the worst *valid* step (a step flagged client_limited on a busy host is not it)
    worst = max((row for row in rows.values() if row["valid"]), key=lambda row: row["client_remainder_ms"])
    r = capacity("analyze", str(folder), "--quiet", "--format", "json",
                 "--client-remainder-max-ms", str(worst["client_remainder_ms"] / 2),
                 "--queue-dominant-share", str(min(1.0, share + (1 - share) / 2)))
    assert r.returncode in (0, 1), r.stderr
    verdict = json.loads(r.stdout)["verdict"]
    reasons = verdict["reasons"]
    assert not any(x.startswith("TTFT is") for x in reasons)
    assert any(x.startswith(f"The measurement path adds {worst['client_remainder_ms']:.1f} ms to TTFT at "
                            f"{worst['level']:g} user{'' if worst['level'] == 1 else 's'}") for x in reasons), reasons
    assert "verdict.client_remainder_max_ms" in [x["key"] for x in verdict["settings"]]
