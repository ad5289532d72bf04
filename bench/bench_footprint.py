"""Footprint: thousands of slow streams in one worker process — memory per stream, timing kept.

The embedded simulator (its own process) serves every stream at once (max_num_seqs = streams) at
a few tokens/s; one generator process runs STREAMS LLMUser greenlets in closed loop through the
real path (plugin.register: records sink, live stats, Locust request events), started over a few
seconds so the simulator's accept queue keeps up. Printed for 50 and for STREAMS streams:

- RSS per in-flight stream: (the process's peak RSS while every stream was in flight − its RSS
  before the first user) / streams in flight. Goal ≤ 50 KB.
- records: every request that started was recorded, and every successful one has its
  max_tokens chunks stamped with the server's usage.
- TTFT error against the simulator's truth log: when the client stamped the first token (sent_unix
  + TTFT) − when the simulator wrote it (arrival_unix + first_token_s), p50 / p99 over the
  requests — the client's share of TTFT, without the simulator's own delay in reading a request.
  Goal: at STREAMS within 2 × its value at 50.

File descriptors: each stream holds a socket in both processes, so the bench raises its soft
RLIMIT_NOFILE to the hard limit (inherited by both children) and says so.
BENCH_FOOTPRINT_STREAMS (default 5000), BENCH_FOOTPRINT_SECONDS (plateau, default 8).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
STREAMS = int(os.environ.get("BENCH_FOOTPRINT_STREAMS", "5000"))
PLATEAU_S = float(os.environ.get("BENCH_FOOTPRINT_SECONDS", "8"))
MAX_TOKENS = 24  # the largest per-prompt max_tokens (8..24)
STEP_MS = 500.0  # one token per stream every 0.5 s: 2 tokens/s
SPAWN_PER_S = 1000.0
GOAL_RSS_KB = 50.0
GOAL_TTFT_RATIO = 2.0


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(url: str, streams: int, plateau_s: float) -> dict[str, Any]:
    import locust  # noqa: F401, I001  (monkey-patches first)
    import argparse
    import gc

    import gevent
    from locust.env import Environment
    from locust.event import Events

    from capacity_plugins import plugin
    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.client.users import LLMUser
    from capacity_plugins.rehearsal.source import RequestSource

    tmp = Path(tempfile.mkdtemp(prefix="bench_footprint_"))
    corpus = tmp / "c.jsonl"
    # Output lengths 8..24 tokens, so the closed loop does not send every stream's next request at once.
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}", "max_tokens": 8 + i % 17}) + "\n"
                              for i in range(2000)))
    ns = argparse.Namespace(dialect="openai-chat", model="sim-model", corpus=str(corpus), min_distinct=1,
                            max_tokens=MAX_TOKENS, results_dir=str(tmp / "out"), timeout_s=120.0)
    user_class = type("FootprintUser", (LLMUser,), {"host": url})
    env = Environment(user_classes=[user_class], events=Events(), host=url, parsed_options=ns)
    env.create_local_runner()
    plugin.register(env)
    llm, source = LLMClient.of(env), RequestSource.of(env)
    source.sampler = source.corpus.sampler("random", 0, 0, 1)
    records: list[Any] = []
    state = {"inflight": 0, "started": 0, "stop": False}

    def loop() -> None:
        user = user_class(env)
        while not state["stop"]:
            state["inflight"] += 1
            state["started"] += 1
            try:
                records.append(user.call(source.next_sample()))
            finally:
                state["inflight"] -= 1

    gc.collect()
    gevent.sleep(0.5)
    rss0 = rss_bytes()
    cpu0 = time.process_time()
    greenlets = []
    for i in range(streams):
        greenlets.append(gevent.spawn(loop))
        if i % 50 == 49:
            gevent.sleep(50 / SPAWN_PER_S)
    deadline = time.monotonic() + 120
    while state["inflight"] < streams and time.monotonic() < deadline:
        gevent.sleep(0.1)
    full_at = time.monotonic()
    peak = 0
    inflight_at_peak = 0
    while time.monotonic() - full_at < plateau_s:
        gevent.sleep(0.25)
        rss = rss_bytes()
        if rss > peak:
            peak, inflight_at_peak = rss, state["inflight"]
    state["stop"] = True
    gevent.joinall(greenlets, timeout=180)
    cpu_s = time.process_time() - cpu0
    assert llm.records is not None
    llm.records.close()
    lines = sum(1 for _ in (Path(ns.results_dir) / "requests.jsonl").open("rb"))
    ok = [r for r in records if r.ok]
    complete = sum(1 for r in ok if r.output_tokens == r.max_tokens and r.output_tokens_source == "usage"
                   and len(r.itl_ms) + 1 == r.max_tokens)
    return {
        "rss0": rss0, "peak": peak, "cpu_s": cpu_s, "chunks": sum(len(r.itl_ms) + 1 for r in records if r.ok), "inflight": inflight_at_peak, "started": state["started"],
        "records": len(records), "written": lines, "ok": len(ok), "complete": complete,
        "errors": sorted({str(r.error_kind) for r in records if not r.ok}),
        # when the client stamped the first token (wall clock: sent_unix + TTFT)
        "first": [(r.response_id, r.sent_unix + r.ttft_ms / 1000.0, r.ttft_ms) for r in ok
                  if r.ttft_ms is not None],
    }


def run(streams: int, tmp: Path) -> dict[str, Any]:
    from capacity_plugins.simulator.config import SimConfig
    from capacity_plugins.simulator.launch import SimulatorProcess
    from capacity_plugins.simulator.truth import read_truth

    truth_path = tmp / f"truth_{streams}.jsonl"
    config = SimConfig(max_num_seqs=streams, kv_cache_tokens=streams * 256, decode_base_ms=STEP_MS,
                       decode_per_seq_ms=0.0, prefill_tokens_per_s=10_000_000.0, force_max_tokens=True)
    with SimulatorProcess(config, truth_log=truth_path) as sim:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        simproc = psutil.Process(sim._proc.pid)
        c0, t0 = sum(simproc.cpu_times()[:2]), time.monotonic()
        out = subprocess.run([sys.executable, __file__, "--child", sim.url, str(streams), str(PLATEAU_S)],
                             env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        sim_core = (sum(simproc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    result = next((json.loads(x[7:]) for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if result is None:
        raise RuntimeError(f"footprint child failed: {out.stderr[-3000:]}")
    truth = {t["id"]: t for t in read_truth(truth_path, min_rows=0)}
    # The client's first-token stamp against the server's first-token write (both wall clock,
    # one machine): what the client adds to TTFT, without the server's own queueing before it
    # read the request (a Python simulator taking a burst of requests is slow to read them).
    joined = [(first, ttft, truth[rid]) for rid, first, ttft in result.pop("first")
              if rid in truth and truth[rid].get("first_token_s") is not None]
    errors = sorted((first - t["arrival_unix"] - t["first_token_s"]) * 1000.0 for first, _, t in joined)
    # For context: client TTFT − the simulator's read → first write (adds the simulator's delay
    # in reading requests that arrive together, and the request's way there).
    diffs = sorted(ttft - t["first_token_s"] * 1000.0 for _, ttft, t in joined)
    result["ttft_diff_p50"] = diffs[max(0, math.ceil(0.5 * len(diffs)) - 1)] if diffs else float("nan")
    result["ttft_diff_p99"] = diffs[max(0, math.ceil(0.99 * len(diffs)) - 1)] if diffs else float("nan")
    result["n"] = len(errors)
    result["p50"] = errors[max(0, math.ceil(0.5 * len(errors)) - 1)] if errors else float("nan")
    result["p99"] = errors[max(0, math.ceil(0.99 * len(errors)) - 1)] if errors else float("nan")
    result["sim_core"] = sim_core
    result["rss_per_stream_kb"] = (result["peak"] - result["rss0"]) / max(result["inflight"], 1) / 1024
    return result


def main() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < STREAMS + 500:
        print(f"RLIMIT_NOFILE hard limit {hard} is below {STREAMS + 500}: raise it (ulimit -Hn) to run this bench")
        return 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = Path(tempfile.mkdtemp(prefix="bench_footprint_"))
    results = {n: run(n, tmp) for n in (50, STREAMS)}
    print(f"{STREAMS} concurrent slow streams (simulator: {1000 / STEP_MS:g} tokens/s each, 8-{MAX_TOKENS} tokens a "
          f"request, closed loop) in one generator process; RLIMIT_NOFILE soft raised {soft} -> {hard} "
          "(setrlimit in the bench, inherited by the simulator and the generator)")
    for n, r in results.items():
        print(f"  {n:>5} streams: {r['inflight']:>5} in flight at peak RSS, RSS {r['rss0'] / 2**20:.0f} -> "
              f"{r['peak'] / 2**20:.0f} MiB = {r['rss_per_stream_kb']:.1f} KB/stream; records {r['records']} "
              f"(written {r['written']}, started {r['started']}), ok {r['ok']}, complete {r['complete']}, errors "
              f"{r['errors'] or 'none'}; first-token stamp - truth p50 {r['p50']:.3f} ms, p99 {r['p99']:.3f} ms (n={r['n']}); "
              f"TTFT - truth TTFT p50 {r['ttft_diff_p50']:.3f} ms, p99 {r['ttft_diff_p99']:.3f} ms; generator "
              f"{r['cpu_s'] / max(r['chunks'], 1) * 1e6:.0f} us CPU per chunk (one chunk per read), simulator "
              f"{r['sim_core']:.0%} of a core")
    big, small = results[STREAMS], results[50]
    ratio = big["p99"] / small["p99"] if small["p99"] > 0 else float("nan")
    print(f"  goal 3: RSS/stream {big['rss_per_stream_kb']:.1f} KB (goal <= {GOAL_RSS_KB:g}, "
          f"{big['rss_per_stream_kb'] / GOAL_RSS_KB:.2f} x goal); records complete "
          f"{big['complete'] == big['ok'] and big['written'] == big['records'] == big['started']}; TTFT error p99 "
          f"{STREAMS} / 50 streams = {ratio:.2f} (goal <= {GOAL_TTFT_RATIO:g}, {ratio / GOAL_TTFT_RATIO:.2f} x goal)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))), flush=True)
    else:
        sys.exit(main())
