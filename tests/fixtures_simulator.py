"""Fixtures that start the embedded simulator (owned by the simulator work).

`start_simulator(truth_log=None, **simconfig_fields)` starts one more simulator subprocess on a
free loopback port and stops it at teardown; `simulator` is a module-wide one with defaults for
tests that just need a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.launch import SimulatorProcess

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
