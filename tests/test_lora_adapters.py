"""LoRA adapters and model mixes: a workload class names its own `model`; the simulator serves
adapters under vLLM's rules (at most `max_loras` in a batch, a load stalls its step `lora_swap_ms`);
capacity per adapter and for the mix, the limiting adapter named."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
import yaml
from helpers.processes import capacity
from helpers.results import read_records, results_dir
from helpers.scenarios import scenario_error, write_yaml

from capacity_plugins.analysis.intervals import share_ci
from capacity_plugins.contracts.summary import load_summary
from capacity_plugins.outputs.workloads_text import workload_lines
from capacity_plugins.rehearsal.workloads import specs_from_scenario
from capacity_plugins.scenario import load_scenario
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.engine import Engine, Sequence
from capacity_plugins.simulator.metrics import EngineMetrics

ADAPTERS = 4
MAX_LORAS = 2
SWAP_MS = 100.0


def _run_engine(cfg: SimConfig, adapters: list[str | None], target: int = 3,
                exposed: list[bytes] | None = None) -> tuple[list[int], Engine]:
    """Submit one request per entry at once and run the engine until all finish; the number of
    distinct adapters in the batch at each token emission (and, into `exposed`, /metrics then)."""
    engine = Engine(cfg, EngineMetrics(cfg), random.Random(0))
    seen: list[int] = []
    done = 0

    def on_token(seq: Sequence) -> None:
        seen.append(len({s.adapter for s in engine.running if s.adapter is not None}))
        if exposed is not None:
            exposed.append(engine.metrics.render())

    def on_finish(seq: Sequence) -> None:
        nonlocal done
        done += 1

    async def main() -> None:
        task = asyncio.ensure_future(engine.run())
        for i, a in enumerate(adapters):
            seq = Sequence(str(i), 8, [], target, target, 0.0, on_token, on_finish)
            seq.adapter = a
            engine.submit(seq)
        while done < len(adapters):
            await asyncio.sleep(0.005)
        task.cancel()

    asyncio.run(main())
    return seen, engine


def test_a_batch_never_holds_more_adapters_than_max_loras_and_loads_follow_lru():
    cfg = SimConfig(max_num_seqs=8, lora_adapters=ADAPTERS, max_loras=MAX_LORAS, lora_swap_ms=0.0,
                    decode_base_ms=0.2, decode_per_seq_ms=0.0)
    order = [f"lora-{1 + i % ADAPTERS}" for i in range(16)] + [None, None]
    exposed: list[bytes] = []
    seen, engine = _run_engine(cfg, order, exposed=exposed)
    assert max(seen) == MAX_LORAS  # the cap binds: four adapters were queued at once
    # The first batch: lora-1 and lora-2's eight requests fill the 8 slots. In the queue, lora-3
    # and lora-4's eight are deferred (their adapter cannot join), the two base-model requests wait
    # for a slot: vLLM's num_requests_waiting_by_reason, which the analysis reads as server_deferred.
    first = exposed[0].decode()
    assert 'vllm:num_requests_waiting_by_reason{engine="0",model_name="sim-model",reason="deferred"} 8.0' in first
    assert 'reason="capacity"} 2.0' in first and "vllm:num_requests_waiting{" in first
    assert engine.adapters is not None and len(engine.adapters.loaded) == MAX_LORAS
    # every adapter was loaded at least once; with all four queued the batch took two, then two more
    assert engine.adapters.loads == ADAPTERS
    # within max_loras the batch fills every slot: nothing held back, no load after the first two
    seen, engine = _run_engine(cfg, [f"lora-{1 + i % 2}" for i in range(8)])
    assert engine.adapters is not None and engine.adapters.loads == 2
    assert seen[:8] == [2] * 8  # all eight joined the first step together


def test_a_class_names_its_model_and_a_bad_one_is_one_line(tmp_path):
    s = load_scenario(write_yaml(tmp_path, """
target: {url: embedded, simulator: {lora_adapters: 2}}
slo: {ttft_p95_ms: 1000}
workloads:
  - {name: a, model: lora-1}
  - {name: base}
"""))
    a, base = s.workload_classes
    assert (a.model, base.model) == ("lora-1", None)
    # the model travels with the class's request settings, so the lane sends it (RequestParams.model)
    assert [spec.request for spec in specs_from_scenario(s)] == [{"model": "lora-1"}, {}]
    msg = scenario_error(tmp_path, "target: {url: embedded}\nslo: {ttft_p95_ms: 1000}\n"
                                   "workloads: [{name: a, model: ''}]\n")
    assert "workloads[0].model" in msg and "\n" not in msg.strip()
    for bad in ({"lora_adapters": -1}, {"max_loras": 0}, {"lora_swap_ms": -5}):
        with pytest.raises(Exception, match=next(iter(bad))):
            SimConfig.from_mapping(bad)


def _scenario(tmp_path, **overrides):
    doc = {
        "name": "lora",
        "target": {"url": "embedded", "dialect": "openai-chat",
                   "simulator": {"max_num_seqs": 8, "lora_adapters": ADAPTERS, "max_loras": MAX_LORAS,
                                 "lora_swap_ms": SWAP_MS}},
        "corpus": {"path": "synthetic:prompt_tokens=32,n=2000,seed=1", "min_distinct": 1000},
        "request": {"max_tokens": 8, "ignore_eos": True, "timeout_s": 30},
        "load": {"kind": "concurrency_sweep", "levels": [1, 8], "step_s": 5, "warmup_s": 1, "min_requests": 5,
                 "max_loop_lag_p99_ms": 500},
        "slo": {"ttft_p95_ms": 400},
        "workloads": [{"name": f"a{i}", "model": f"lora-{i}"} for i in range(1, ADAPTERS + 1)],
        "output": str(tmp_path / "results"),
    }
    doc.update(overrides)
    return write_yaml(tmp_path, yaml.safe_dump(doc))


def test_a_class_model_the_server_does_not_serve_stops_the_run_at_preflight(tmp_path):
    sc = _scenario(tmp_path, workloads=[{"name": "x", "model": f"lora-{ADAPTERS + 1}"}])
    r = capacity("run", str(sc), timeout=60)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"workloads[0].model 'lora-{ADAPTERS + 1}' is not served" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.measured  # the level-1 TTFTs against the configured swap cost
def test_adapters_beyond_max_loras_pay_the_swap_and_the_mix_names_its_limiting_adapter(tmp_path):
    # Four adapters drawn uniformly, two GPU slots (LRU), a load stalls its step 100 ms. At one
    # user a request finds its adapter loaded with probability max_loras / adapters = 1/2 (LRU
    # under independent uniform draws), so half the TTFTs carry the 100-ms load and half are a
    # bare step (~12 ms). At 8 users (the slot count) the batch may hold only two adapters' requests
    # and loads stall everyone: throughput stays below the base model's closed form, 8 slots /
    # (8 steps of 16 ms + prefill) ≈ 60 rps.
    r = capacity("run", str(_scenario(tmp_path)), "--no-analyze", timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    # summary.json only: the report's words come from the same renderer below, without its plots
    a = capacity("analyze", str(folder), "--quiet", "--no-report", timeout=180)
    assert a.returncode in (0, 1), a.stdout[-3000:] + a.stderr[-3000:]  # 1: the SLO failed somewhere
    recs = [x for x in read_records(folder) if x["step"] == 0 and not x["warmup"] and x["ok"]]
    assert {x["workload"] for x in recs} == {f"a{i}" for i in range(1, ADAPTERS + 1)}
    loaded = [x["ttft_ms"] > SWAP_MS / 2 for x in recs]
    lo, hi = share_ci(sum(loaded), len(loaded), 0.99)
    assert lo <= 1 - MAX_LORAS / ADAPTERS <= hi, (sum(loaded), len(loaded))
    slow = [x["ttft_ms"] for x, hit in zip(recs, loaded, strict=True) if hit]
    assert min(slow) >= SWAP_MS  # a load is the whole configured stall
    s = json.loads((folder / "summary.json").read_text())
    at8 = next(st for st in s["steps"] if st["level"] == 8)
    assert at8["rps"] < 0.6 * 8 / (8 * 0.016 + 0.003), at8["rps"]
    # ... because requests of the other adapters wait, deferred, with batch slots free: the server
    # says so (num_requests_waiting_by_reason) and the analysis names it, not the GPU
    at1 = next(st for st in s["steps"] if st["level"] == 1)
    assert at1["server_deferred"] == 0.0 and at8["server_deferred"] > 0.5, (at1, at8)
    assert at8["server_deferred"] <= at8["server_waiting"]
    # from verdict.deferred_min (1) on, the adapters are named (measured here: 1.2 deferred of 2.4 waiting)
    named = any("LoRA adapter to join a batch" in h for h in s["verdict"]["bottleneck_hints"])
    assert named == (s["verdict"]["bottleneck"] == "adapters") == (at8["server_deferred"] >= 1.0), s["verdict"]
    classes = {k["name"]: k for k in s["workloads"]["classes"]}
    assert {k: v["model"] for k, v in classes.items()} == {f"a{i}": f"lora-{i}" for i in range(1, ADAPTERS + 1)}
    # each adapter has its own latency per step; the mix's capacity is the lowest, its adapter named
    assert all(st["workloads"][f"a{i}"]["ttft_p95_ms"] for st in s["steps"] for i in range(1, ADAPTERS + 1))
    lowest = min(classes.values(), key=lambda k: k["capacity"]["per_node_rps"] or 0.0)
    assert s["capacity"]["limiting_workload"] == lowest["name"]
    lines = workload_lines(load_summary(folder / "summary.json"))  # type: ignore[arg-type]
    assert any(line.startswith("a1 (model lora-1, weight 1") for line in lines), lines
    assert f"limited by class {lowest['name']}" in lines[-1], lines
