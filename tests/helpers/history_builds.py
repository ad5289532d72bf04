"""Three builds' repeat sets of scenarios/ci-gate.yaml, run by the simulator's engine in virtual time.

The run catalog's and the gate's tests (tests/test_history.py, tests/test_history_ci.py) need
runs whose capacity is known and whose spread is the engine's own, not the host's load: ten
sweeps of `helpers.virtual_sim.virtual_sweep` (the simulator's continuous-batching engine under a
virtual clock) take seconds of CPU, where ten real sweeps took four minutes and were judged client
limited on a loaded host. Build a (the baseline: 4 repeats) and build b (3) run on an 8-slot
server, build c (3) on the same server with 4 batch slots.

Each repeat set is laid out as `capacity run --repeat N` writes it (repeats.json and repeat-1 …
repeat-N), each repeat with scenarios/ci-gate.yaml as run (resolved under `CI_ENV`, the settings a
pipeline gives it) and a meta.json holding what a real run's says of the simulator (its answer
to the server probe), `simulated: true` (every reading is the engine's) and the labels `capacity run --label
build=X` writes: the scenario's `labels:` under the build's. Sets are analysed to summary.json, as
`capacity run` does before it records them; `record` puts them in a catalog and blesses the baseline.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capacity_plugins import analyze
from capacity_plugins.cli import main
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.scenario.files import load_scenario
from capacity_plugins.scenario.model import Scenario
from helpers.analysis_data import T0
from helpers.paths import ROOT, TESTS
from helpers.virtual_sim import true_throughput, virtual_sweep

# A simulated server (16-token answers) whose decode steps are long beside what HTTP, streaming
# and the load generator add to a real run of it (a few ms): the gate compares a real single run
# (tests/test_history_ci.py) with this engine's virtual runs, and their TTFT must differ by less
# than a single run's noise (measured: a real run's TTFT P95 at 8 users 9-14 % above the virtual
# one, with a nice-19 CPU burner beside it too; with 6.7-ms steps it was 74 %, "worse"). The 8-slot one serves about 19 req/s at 8 users, the 4-slot one about
# 13 — the drop the catalog must show and the gate catch.
SERVER = {"decode_base_ms": 20.0, "decode_per_seq_ms": 1.5, "prefill_tokens_per_s": 200000}
# scenarios/ci-gate.yaml's settings from the environment, as a pipeline (or a test) gives them
CI_ENV = {"STEP_S": "2", "WARMUP_S": "1", "MIN_REQUESTS": "20", "MAX_TOKENS": "16", "TTFT_P95_MS": "600",
          "TPOT_P95_MS": "50"}
# build → (repeats, batch slots)
BUILDS = {"a": (4, 8), "b": (3, 8), "c": (3, 4)}
# Requests per measured window: virtual time costs nothing, and 1000 requests put a level's
# run-to-run spread near 1 % (the window is sized from the engine's long-run rate, as the step
# extension sizes a real one).
REQUESTS_PER_STEP = 1000
# What the simulator answers a real run's server probe (rehearsal/meta.py probe_server), as a real
# run of it recorded it.
SIMULATOR_PROBE = json.loads((TESTS / "data_results/quickstart/meta.json").read_text())["server"]


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set, restored afterwards (the scenario expands ${VAR} from it)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ci_scenario() -> Scenario:
    """scenarios/ci-gate.yaml as a pipeline with `CI_ENV` runs it."""
    with environment(CI_ENV):
        return load_scenario(ROOT / "scenarios/ci-gate.yaml")


def _meta(scenario: Scenario, labels: dict[str, str], start: float, end: float) -> Meta:
    # no telemetry: scenarios/ci-gate.yaml scrapes nothing
    return Meta.model_validate({
        "tool": "capacity-plugins", "dialect": scenario.target.dialect, "model": SIMULATOR_PROBE["models"][0],
        "target": scenario.target.url, "simulated": True, "server": SIMULATOR_PROBE, "scenario": scenario.name,
        "load_kind": scenario.load.kind, "start_unix": start, "end_unix": end, "complete": True,
        "steps_planned": 2, "steps_run": 2, "labels": {**scenario.labels, **labels}})


def virtual_set(path: Path, build: str, *, repeats: int, slots: int, seed0: int, t0: float,
                scenario: Scenario) -> Path:
    """One build's repeat set, analysed: `repeats` virtual sweeps of `scenario`'s levels."""
    levels = [int(x) for x in scenario.load.levels]
    config: dict[str, Any] = {"max_num_seqs": slots, **SERVER}
    max_tokens = int(scenario.request.max_tokens)
    rates = [true_throughput(n, seconds=60.0, max_tokens=max_tokens, **config) for n in levels]
    names = [f"repeat-{i + 1}" for i in range(repeats)]
    start = t0
    for i, name in enumerate(names):
        run = virtual_sweep(path / name, levels=levels, rates=rates, requests_per_step=REQUESTS_PER_STEP,
                            warmup_s=float(scenario.load.warmup_s), max_tokens=max_tokens, seed=seed0 + i, t0=start,
                            **config)
        steps = json.loads((run / "steps.json").read_text())["steps"]
        end = max(s["drain_end_unix"] for s in steps)
        (run / "scenario.yaml").write_text(scenario.resolved_yaml())
        _meta(scenario, {"build": build}, start, end).write(run / "meta.json")
        start = end + 600.0  # the next pipeline run, ten minutes later
    (path / "repeats.json").write_text(json.dumps({"scenario": scenario.name, "repeats": names}))
    analyze(path, formats=["json"])
    return path


def virtual_builds(parent: Path, builds: dict[str, tuple[int, int]] = BUILDS) -> dict[str, Path]:
    """`builds`' repeat sets under `parent` (one folder each), one pipeline run after another."""
    scenario = ci_scenario()
    sets, t0 = {}, T0
    for k, (build, (repeats, slots)) in enumerate(builds.items()):
        sets[build] = virtual_set(parent / build / f"ci-gate-{build}", build, repeats=repeats, slots=slots,
                                  seed0=100 * (k + 1), t0=t0, scenario=scenario)
        t0 += 86400.0  # a build a day
    return sets


def record(sets: dict[str, Path], where: str, blessed: str = "a") -> None:
    """`capacity history add` of the sets (and their repeats) into the catalog at `where`; the
    `blessed` build's set blessed as `release`."""
    assert main(["history", "add", *(str(p) for p in sets.values()), "--history", where]) == 0
    assert main(["history", "bless", str(sets[blessed]), "--as", "release", "--history", where]) == 0
