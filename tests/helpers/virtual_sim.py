"""The embedded simulator's own engine in virtual time: a closed-loop sweep in a fraction of a second.

`virtual_sweep(path, levels, requests_per_step, seed, **SimConfig fields)` runs
`capacity_plugins.simulator.engine.Engine` — the continuous-batching scheduler the simulator
serves every dialect with, unchanged — under an asyncio loop whose clock only moves when every
coroutine waits (no I/O: a select() with a timeout advances the clock by it). Closed-loop users
submit a request, wait for its last token, and send the next at once, as `LLMUser` does. Each
level gets a fresh engine, a warm-up, a measured window sized for about `requests_per_step`
requests, and a drain; the folder it writes (requests.jsonl, steps.json, scenario.yaml, meta.json)
is what the analysis reads from a real run. Time, not the engine, is what is simulated, so the
knee and capacity of these runs are those of the simulator's configuration.

`true_throughput(level, **config)` is the same engine over a long window: the truth a short step's
estimate is judged against (the calibration study, tests/test_calibration.py and
bench/bench_calibration.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.simulator import engine as engine_mod
from capacity_plugins.simulator import metrics as metrics_mod
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.engine import Engine, Sequence
from capacity_plugins.simulator.metrics import EngineMetrics
from helpers.analysis_data import T0, _write_rest

PROMPT_TOKENS = (100, 400)  # a uniform draw per request, like a mixed corpus


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def _virtual_time() -> Iterator[tuple[asyncio.AbstractEventLoop, _Clock]]:
    """An event loop on a virtual clock, and the engine's perf_counter pointed at the same clock."""
    clock = _Clock()
    loop = asyncio.new_event_loop()
    loop.time = clock  # type: ignore[method-assign]

    def select(timeout: float | None = None) -> list:
        if timeout is None:
            raise RuntimeError("virtual time: every coroutine waits on something that will never happen")
        clock.now += max(timeout, 0.0)
        return []

    loop._selector.select = select  # type: ignore[attr-defined]
    saved = engine_mod.perf_counter, metrics_mod.perf_counter
    engine_mod.perf_counter = metrics_mod.perf_counter = clock  # type: ignore[assignment]
    try:
        yield loop, clock
    finally:
        engine_mod.perf_counter, metrics_mod.perf_counter = saved  # type: ignore[assignment]
        loop.close()


def _level(users: int, warmup_s: float, window_s: float, config: SimConfig, max_tokens: int,
           seed: int) -> list[tuple[float, float, float, int]]:
    """(sent, ttft_s, e2e_s, output tokens) of every request sent after t = 0, clock from 0."""
    out: list[tuple[float, float, float, int]] = []
    with _virtual_time() as (loop, clock):
        rng = random.Random(f"{seed}:{users}")
        eng = Engine(config, EngineMetrics(config), random.Random(seed * 1000 + users))
        end = warmup_s + window_s

        async def user(u: int) -> None:
            await asyncio.sleep(u * 1e-4)  # users start a moment apart, as spawned users do
            while clock.now < end:
                done = loop.create_future()
                first: list[float] = []
                sent = clock.now

                def on_token(seq: Sequence, first: list[float] = first) -> None:
                    if not first:
                        first.append(clock.now)

                def on_finish(seq: Sequence, done: asyncio.Future = done) -> None:
                    done.set_result(clock.now)

                seq = Sequence(f"{u}-{len(out)}", rng.randint(*PROMPT_TOKENS), [], max_tokens,
                               eng.output_length(max_tokens, 0, False), sent, on_token, on_finish)
                eng.submit(seq)
                finished = await done
                out.append((sent, first[0] - sent, finished - sent, seq.generated))

        async def main() -> None:
            runner = loop.create_task(eng.run())
            await asyncio.gather(*(user(u) for u in range(users)))
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

        loop.run_until_complete(main())
    return out


def true_throughput(users: int, *, seconds: float = 400.0, max_tokens: int = 64, seed: int = 12345,
                    **config: Any) -> float:
    """Requests per second of `users` closed-loop users over a long window (warm-up 20 s excluded)."""
    cfg = SimConfig(**config)
    recs = _level(users, 20.0, seconds, cfg, max_tokens, seed)
    return sum(1 for s, *_ in recs if 20.0 <= s < 20.0 + seconds) / seconds


def virtual_sweep(path: Path, *, levels: list[int], rates: list[float], requests_per_step: int = 200,
                  warmup_s: float = 3.0, max_tokens: int = 64, seed: int = 0, slo: dict[str, Any] | None = None,
                  capacity: dict[str, Any] | None = None, t0: float = T0, **config: Any) -> Path:
    """A closed-loop sweep's results folder; `rates` (rps per level, e.g. `true_throughput`) size
    each measured window for about `requests_per_step` requests, as the product's step extension
    does. `t0`: the first step's start (unix seconds)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = SimConfig(seed=seed, **config)
    lines: list[bytes] = []
    steps = []
    rid = 0
    for k, (users, rate) in enumerate(zip(levels, rates, strict=True)):
        window = requests_per_step / rate
        recs = _level(users, warmup_s, window, cfg, max_tokens, seed)
        for sent, ttft, e2e, tokens in recs:
            gap_ms = (e2e - ttft) * 1000 / max(tokens - 1, 1)
            lines.append(orjson.dumps({
                "request_id": f"v{rid}", "response_id": None, "prompt_id": f"p{rid % 1500}", "worker": 0, "step": k,
                "warmup": sent < warmup_s, "attempt": 1, "ok": True, "status": 200, "error_kind": None,
                "error": None, "scheduled_unix": None, "sent_unix": t0 + sent, "ttft_ms": ttft * 1000,
                "first_visible_ms": ttft * 1000, "e2e_ms": e2e * 1000, "ttft_from_schedule_ms": None,
                "e2e_from_schedule_ms": None, "tpot_ms": gap_ms if tokens > 1 else None, "itl_ms": [],
                "itl_tokens": None, "prompt_tokens": None, "output_tokens": tokens, "output_tokens_source": "usage",
                "client_output_tokens": None, "max_tokens": max_tokens, "stream": True, "workload": None}))
            rid += 1
        drain_end = t0 + max(s + e for s, _, e, _ in recs)
        steps.append({"index": k, "kind": "concurrency", "level": users, "start_unix": t0,
                      "warmup_end_unix": t0 + warmup_s, "end_unix": t0 + warmup_s + window, "drain_end_unix": drain_end,
                      "client_cpu_max_pct": 20.0, "client_limited": False})
        t0 = drain_end + 1.0
    (path / "requests.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    _write_rest(path, steps, None, "concurrency", slo if slo is not None else {"ttft_p95_ms": None, "tpot_p95_ms": None,
                "e2e_p95_ms": None}, capacity, True, None, None, [])
    return path


LEVELS = [1, 2, 4, 8, 16, 32]
STUDY_SLO = {"ttft_p95_ms": 1500.0, "tpot_p95_ms": 100.0}


def calibration_study(workdir: Path, *, runs: int, requests_per_step: int = 200, truth_s: float = 3000.0,
                      seed0: int = 100, levels: list[int] = LEVELS, **config: Any) -> dict[str, Any]:
    """`runs` seeded sweeps of the simulator's engine, each analysed as a real run's folder, against
    the truth of the same engine over long windows: how often the stated intervals hold it, and
    where the knee was found. The knee's truth is the engine's slot count (`max_num_seqs`): a
    closed loop saturates when every slot is busy."""
    from capacity_plugins import analyze

    truth = [true_throughput(n, seconds=truth_s, **config) for n in levels]
    long = analyze(virtual_sweep(workdir / "truth", levels=levels, rates=truth, requests_per_step=20 * requests_per_step,
                                 seed=seed0 - 1, slo=STUDY_SLO, **config), formats=["json"])
    true_capacity = long.capacity.per_node_rps
    covered = {n: 0 for n in levels}
    counted = {n: 0 for n in levels}
    widths: list[float] = []
    knees: dict[str, int] = {}
    capacity_covered = 0
    for i in range(runs):
        s = analyze(virtual_sweep(workdir / f"run{i}", levels=levels, rates=truth, requests_per_step=requests_per_step,
                                  seed=seed0 + i, slo=STUDY_SLO, **config), formats=["json"])
        for row, x in zip(s.steps, truth, strict=True):
            lo, hi = row.rps_ci
            covered[row.level] += lo <= x <= hi
            c_lo, c_hi = row.rps_counted_ci
            counted[row.level] += c_lo <= x <= c_hi
            widths.append((hi - lo) / 2 / row.rps)
        key = "none" if s.knee.value is None else f"{s.knee.value:g}"
        knees[key] = knees.get(key, 0) + 1
        ci = s.capacity.per_node_rps_ci
        capacity_covered += bool(ci and true_capacity is not None and ci[0] <= true_capacity <= ci[1])
    return {"runs": runs, "requests_per_step": requests_per_step, "truth_rps": truth, "true_capacity": true_capacity,
            "coverage": sum(covered.values()) / (runs * len(levels)),
            "coverage_by_level": {n: c / runs for n, c in covered.items()},
            "counted_coverage": sum(counted.values()) / (runs * len(levels)),
            "median_half_width": sorted(widths)[len(widths) // 2], "knees": knees,
            "capacity_coverage": capacity_covered / runs}
