"""How far the client's TTFT and ITL sit from the server's own truth, under a real `locust` run.

The simulator logs when it wrote each token (its truth log); the plugin records when it read it.
Both measure from the request, so per request `client TTFT - server first_token` is what the
client and loopback add, and per gap `|client ITL - server ITL|` is the jitter they add. Two users,
light load, a ~9 ms decode step. Goals: TTFT offset median ≤ 1 ms and p99 ≤ 3 ms, ITL difference
median ≤ 1 ms. A busy machine adds scheduler stalls to the tail: the figure is the machine's as
much as the plugin's, which is why tests/test_accuracy.py keeps only the functional checks (the
client never sees a token before the server wrote it, and each token is matched to its own).
Prints, never asserts.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.processes import run_locust
from helpers.results import read_records
from helpers.scenarios import write_corpus

from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.launch import SimulatorProcess
from capacity_plugins.simulator.truth import read_truth

MAX_TOKENS = 24
SECONDS = 10


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        truth_path = tmp / "truth.jsonl"
        config = SimConfig(decode_base_ms=8.0, decode_per_seq_ms=0.5, prefill_tokens_per_s=20000.0,
                           force_max_tokens=True)
        with SimulatorProcess(config, truth_log=truth_path) as sim:
            corpus = write_corpus(tmp / "c.jsonl", 1200)
            p = run_locust(["--headless", "-u", "2", "-r", "2", "-t", f"{SECONDS}s", "--host", sim.url,
                            "--dialect", "openai-chat", "--model", "sim-model", "--corpus", str(corpus),
                            "--min-distinct", "1000", "--max-tokens", str(MAX_TOKENS),
                            "--results-dir", str(tmp / "out"), "--only-summary"], timeout=SECONDS + 60)
            if p.returncode not in (0, 1):  # 1: requests cut by the stop
                raise SystemExit(f"locust exited {p.returncode}: {p.stderr[-2000:]}")
            ok = [r for r in read_records(tmp / "out") if r["ok"]]
            truth = {t["id"]: t for t in read_truth(truth_path, min_rows=len(ok))}
    ttft, gaps = [], []
    for r in ok:
        t = truth[r["response_id"]]
        ttft.append(r["ttft_ms"] - t["first_token_s"] * 1000.0)
        server = [(b - a) * 1000.0 for a, b in zip(t["token_times_s"], t["token_times_s"][1:], strict=False)]
        gaps += [abs(c - s) for c, s in zip(r["itl_ms"], server, strict=True)]
    med, p99, gmed = statistics.median(ttft), quantile(ttft, 0.99), statistics.median(gaps)
    print(f"{len(ok)} requests, {len(gaps)} ITL gaps, 2 users for {SECONDS} s against the simulator")
    print(f"TTFT client - server: median {med:.3f} ms (goal 1 ms, ratio {med / 1.0:.2f}), "
          f"p99 {p99:.3f} ms (goal 3 ms, ratio {p99 / 3.0:.2f})")
    print(f"ITL |client - server|: median {gmed:.3f} ms (goal 1 ms, ratio {gmed / 1.0:.2f})")


if __name__ == "__main__":
    main()
