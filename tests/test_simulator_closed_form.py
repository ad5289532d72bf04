"""The closed forms docs/simulator.md states, against a short real run: saturated throughput and the
queue share of TTFT with more closed-loop users than slots, every bound derived from the model.

The only measured inputs besides the output are what the model cannot know: how long each client
took to send its next request (`g`), and how much simulated time the host took away from the engine
(`simulator_step_lag_seconds_total`, 0 on an idle machine).
"""

from __future__ import annotations

import statistics
import threading
import time

from helpers.simulator import metric, scrape

from capacity_plugins.simulator.rawclient import Connection
from capacity_plugins.simulator.truth import read_truth

S, BASE_MS, PER_SEQ_MS, RATE = 4, 10.0, 2.0, 10000.0  # max_num_seqs, decode step, prefill tokens/s
P, N, U = 100, 20, 8  # prompt and output tokens per request, closed-loop users (2 × S: saturated)
WARMUP_S, WINDOW_S = 1.0, 2.5


def test_saturated_throughput_and_queue_share_match_the_closed_form(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=S, decode_base_ms=BASE_MS, decode_per_seq_ms=PER_SEQ_MS,
                          prefill_tokens_per_s=RATE)
    body = {"model": "sim-model", "prompt": [1] * P, "max_tokens": N, "ignore_eos": True, "stream": True}
    stop = threading.Event()
    sequences: list[list[str]] = [[] for _ in range(U)]
    received = [0] * U
    failed: list[int] = []

    def user(i: int) -> None:
        with Connection(sim.port) as conn:
            while not stop.is_set():
                resp = conn.request("POST", "/v1/completions", body)
                if resp.status != 200 or not resp.complete:
                    failed.append(resp.status)
                    return
                sequences[i].append(resp.headers["x-request-id"])
                received[i] += resp.body.count(b'"text":')

    threads = [threading.Thread(target=user, args=(i,)) for i in range(U)]
    for t in threads:
        t.start()
    time.sleep(WARMUP_S)
    lag0, t0 = metric(scrape(sim.port), "simulator_step_lag_seconds_total"), time.time()
    time.sleep(WINDOW_S)
    lag1, t1 = metric(scrape(sim.port), "simulator_step_lag_seconds_total"), time.time()
    time.sleep(0.5)  # the window ends while every user is still in the loop
    stop.set()
    for t in threads:
        t.join()
    assert failed == []
    rows = {r["id"]: r for r in read_truth(truth, sum(map(len, sequences)))}
    assert sum(received) == sum(r["output_tokens"] for r in rows.values())  # the clients read it all

    # -- the model ------------------------------------------------------------------------------
    step = (BASE_MS + PER_SEQ_MS * S) / 1000  # a decode step with every slot busy
    avg_step = step + (S / N) * P / RATE  # S/N requests join per step on average, each P tokens of prefill
    assert abs(S / (N * avg_step) - 10.0) < 1e-9  # the closed form's requests/s (200 tokens/s) for these settings
    step_max = step + S * P / RATE  # a step in which every slot's request joins

    # -- throughput: tokens the server wrote in the window (its own write stamps) ---------------
    w, lag = t1 - t0, lag1 - lag0
    tokens = sum(n for r in rows.values() for at, n in zip(r["token_times_s"], r["tokens_per_write"], strict=True)
                 if t0 <= r["arrival_unix"] + at < t1)
    # Every step writes S tokens. The window holds whole steps whose durations sum to the window
    # minus the host's lag, give or take one step at each edge and one request's prefill per slot
    # (joins are S/N per step only on average). Lateness past a due time is at most 1 ms plus lag.
    most = S * (1 + (w + lag + 0.001 + S * P / RATE) / avg_step)
    least = S * (w - 2 * step_max - S * P / RATE - 2 * lag - 0.001) / avg_step
    assert least <= tokens <= most, (tokens, least, most, lag)
    x_lo, x_hi = least / (N * w), most / (N * w)  # requests/s this run can have had, around x_sat

    # -- queue share of TTFT past the slots -----------------------------------------------------
    # Little's law: U - S requests wait, less those between a response and the next request (g).
    gaps = []
    for seq in sequences:
        for prev, nxt in zip(seq, seq[1:], strict=False):
            a, b = rows[prev], rows[nxt]
            if t0 <= b["arrival_unix"] < t1:
                gaps.append(b["arrival_unix"] - (a["arrival_unix"] + a["token_times_s"][-1]))
    g = statistics.mean(gaps)
    arrived = [r for r in rows.values() if t0 <= r["arrival_unix"] < t1]
    queue = statistics.mean(r["queue_s"] for r in arrived)
    prefill = statistics.mean(r["prefill_s"] for r in arrived)
    q_lo, q_hi = (U - S) / x_hi - g - step_max, (U - S) / x_lo - g + step_max  # a join waits for a step boundary
    assert q_lo <= queue <= q_hi, (queue, q_lo, q_hi)
    # The joining step: its decode plus the prefill of 1..S joiners, plus wake-up lateness.
    join_lo, join_hi = step + P / RATE, step_max + 0.001 + lag
    assert join_lo <= prefill <= join_hi, (prefill, join_lo, join_hi)
    share = queue / (queue + prefill)
    assert q_lo / (q_lo + join_hi) <= share <= q_hi / (q_hi + join_lo), share
    assert share > 0.8  # past the slots, TTFT is mostly queue: here ≈ 0.4 s of queue, ≈ 40 ms of prefill


def test_throughput_below_the_knee_lies_within_the_documented_bounds(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth, max_num_seqs=S, decode_base_ms=BASE_MS, decode_per_seq_ms=PER_SEQ_MS,
                          prefill_tokens_per_s=RATE)
    users, n_out = 2, 10
    body = {"model": "sim-model", "prompt": [1] * P, "max_tokens": n_out, "ignore_eos": True, "stream": True}
    stop = threading.Event()
    sequences: list[list[str]] = [[] for _ in range(users)]

    def user(i: int) -> None:
        with Connection(sim.port) as conn:
            while not stop.is_set():
                resp = conn.request("POST", "/v1/completions", body)
                if resp.status == 200 and resp.complete:
                    sequences[i].append(resp.headers["x-request-id"])

    threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    lag0 = metric(scrape(sim.port), "simulator_step_lag_seconds_total")
    time.sleep(2.0)
    lag = metric(scrape(sim.port), "simulator_step_lag_seconds_total") - lag0
    stop.set()
    for t in threads:
        t.join()
    rows = {r["id"]: r for r in read_truth(truth, sum(map(len, sequences)))}
    # Each user's rate over whole cycles (first to last arrival after the warm-up): no partial
    # requests at the edges.
    rates, spans, gaps = [], [], []
    for seq in sequences:
        arrivals = [rows[i]["arrival_unix"] for i in seq]
        t0 = arrivals[0] + 0.5
        kept = [a for a in arrivals if t0 <= a]
        rates.append((len(kept) - 1) / (kept[-1] - kept[0]))
        spans.append(kept[-1] - kept[0])
        for prev, nxt in zip(seq, seq[1:], strict=False):
            a = rows[prev]
            gaps.append(rows[nxt]["arrival_unix"] - (a["arrival_unix"] + a["token_times_s"][-1]))
    x, g = sum(rates), statistics.mean(gaps)
    step = (BASE_MS + PER_SEQ_MS * users) / 1000
    x_lo = users / ((n_out + 1) * step + users * P / RATE + g)
    x_hi = users / (n_out * step + users * P / RATE)
    # The host's lag only slows the engine; a user's span may start or end in a favourable phase
    # by at most one step.
    assert x_lo * (1 - 2 * lag / min(spans)) <= x <= x_hi * (1 + step / min(spans)), (x, x_lo, x_hi, lag)
