"""Cost of `LLMStats.record()` on the hot path, next to Locust's own `RequestStats.log_request`.

Prints µs per recorded request (one TTFT, TPOT, E2E and a 64-gap ITL list) for LLMStats (and for
the LLM tab's per-step numbers, webui/steps.py LiveSteps, as a ratio to it), and
for the Locust route that records the same values in a private `RequestStats` (the usual way to
get ITL into Locust: one log_request per ITL gap plus TTFT/TPOT/E2E), as a ratio measured in
one run. Also prints the worst relative p99 error of each against the exact nearest-rank p99.
"""

import locust  # noqa: F401, I001  (monkey-patches first, as in a real run)

import math
import random
import time

from collections.abc import Callable

from types import SimpleNamespace

from locust.stats import RequestStats

from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.rehearsal.steps import Step
from capacity_plugins.sinks.stats import LLMStats, nearest_rank
from capacity_plugins.webui.steps import LiveSteps

N = 20_000
GAPS = 64


def _requests(rng: random.Random) -> list[tuple[float, list[float], float, float]]:
    out = []
    for _ in range(N):
        ttft = rng.lognormvariate(5, 0.6)
        itl = [rng.lognormvariate(2.2, 0.25) for _ in range(GAPS)]
        out.append((ttft, itl, sum(itl) / GAPS, ttft + sum(itl)))
    return out


def main() -> None:
    reqs = _requests(random.Random(1))
    now = time.time()

    ours = LLMStats()
    t0 = time.perf_counter()
    for ttft, itl, tpot, e2e in reqs:
        ours.record("chat", ok=True, error_kind=None, ttft_ms=ttft, itl_ms=itl, tpot_ms=tpot, e2e_ms=e2e,
                    output_tokens=GAPS + 1, prompt_tokens=100, now_unix=now)
    ours_s = time.perf_counter() - t0

    theirs = RequestStats(use_response_times_cache=False)
    t0 = time.perf_counter()
    for ttft, itl, tpot, e2e in reqs:
        theirs.log_request("TTFT", "chat", ttft, 0)
        for g in itl:
            theirs.log_request("ITL", "chat", g, 0)
        theirs.log_request("TPOT", "chat", tpot, 0)
        theirs.log_request("E2E", "chat", e2e, GAPS + 1)
    theirs_s = time.perf_counter() - t0

    print(f"requests recorded: {N} (each: TTFT, TPOT, E2E + {GAPS} ITL gaps)")
    print(f"LLMStats.record            {ours_s / N * 1e6:8.2f} µs/request")
    print(f"Locust RequestStats route  {theirs_s / N * 1e6:8.2f} µs/request")
    print(f"ratio (Locust / LLMStats)  {theirs_s / ours_s:8.2f}x")
    row = ours.rows()[0]
    for metric, kind, values in (("ttft", "TTFT", [r[0] for r in reqs]), ("itl", "ITL", [g for r in reqs for g in r[1]])):
        exact_sorted = sorted(values)
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            exact = nearest_rank(exact_sorted, q)
            mine = row[f"{metric}_{label}_ms"]
            locust_v = theirs.get("chat", kind).get_response_time_percentile(q)
            print(f"{kind:4} {label} exact {exact:9.3f} ms | LLMStats {mine:9.3f} ({abs(mine - exact) / exact:6.3%} off)"
                  f" | Locust {locust_v:9.3f} ({abs(locust_v - exact) / exact:6.3%} off)")
    # The LLM tab's per-step numbers: one more listener per record where requests.jsonl is written
    live = LiveSteps(SLOConfig(ttft_p95_ms=600.0, tpot_p95_ms=50.0))
    live.step_started(Step(index=0, kind="concurrency", level=8, start_unix=now - 10, warmup_end_unix=now - 9,
                           end_unix=now + 3600))
    records = [SimpleNamespace(step=0, sent_unix=now, ok=True, error_kind=None, ttft_ms=ttft, e2e_ms=e2e, itl_ms=itl,
                               tpot_ms=tpot, output_tokens=GAPS + 1, scheduled_unix=None)
               for ttft, itl, tpot, e2e in reqs]
    t0 = time.perf_counter()
    for r in records:
        live.add(r)
    steps_s = time.perf_counter() - t0
    print(f"LiveSteps.add (LLM tab)    {steps_s / N * 1e6:8.2f} µs/request = {steps_s / ours_s:.2f}x LLMStats.record; "
          f"document() {_time(lambda: live.document(now_unix=now)) * 1e3:.2f} ms")
    t0 = time.perf_counter()
    for _ in range(100):
        d = ours.take_delta()
    print(f"take_delta (empty) {((time.perf_counter() - t0) / 100) * 1e6:.1f} µs; "
          f"rows() {_time(lambda: ours.rows(now)) * 1e3:.2f} ms")
    assert math.isfinite(ours_s) and d is not None


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
