"""Fixtures that start the embedded simulator (owned by the simulator work).

`start_simulator(truth_log=None, **simconfig_fields)` starts one more simulator subprocess on a
free loopback port and stops it at teardown; `simulator` is a module-wide one with defaults for
tests that just need a server. `scrape(port)` / `metric(samples, name, **labels)` read its
/metrics as parsed values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.launch import SimulatorProcess
from capacity_plugins.simulator.rawclient import request

StartSimulator = Callable[..., SimulatorProcess]


@pytest.fixture
def start_simulator() -> Iterator[StartSimulator]:
    started: list[SimulatorProcess] = []

    def start(truth_log: Path | None = None, **fields: Any) -> SimulatorProcess:
        sim = SimulatorProcess(SimConfig(**fields), truth_log=truth_log)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="module")
def simulator() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig()) as sim:
        yield sim


def scrape(port: int) -> dict[str, float]:
    """Sample name + sorted labels → value."""
    text = request(port, "GET", "/metrics").body.decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("engine",))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def metric(samples: dict[str, float], name: str, **labels: str) -> float:
    want = {"model_name": "sim-model", **labels} if not name.startswith("DCGM") else labels
    for key, value in samples.items():
        sample, _, rest = key.partition("{")
        have = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if kv)
        if sample == name and all(have.get(k) == v for k, v in want.items()):
            return value
    raise KeyError(f"{name} {labels} not in /metrics")
