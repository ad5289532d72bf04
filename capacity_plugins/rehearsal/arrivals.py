"""Open-loop arrival schedules (the pacer that makes users send on them is client/pacer.py).

One *global* schedule per step is generated from (seed, step index) — identical in every
process — and worker k of n takes arrivals k, k+n, k+2n, … So the swarm as a whole offers exactly
the target rate (not n× it), and the master can count the arrivals actually offered in a window
without asking the workers. Times are offsets (seconds) from the step's start on an absolute
timeline: a late send never shifts the ones after it (no drift, no coordinated omission).

Gamma inter-arrivals follow vLLM's `--burstiness`: shape k = 1/cv², scale = 1/(rate·k), so the
mean stays 1/rate and cv = 1 is Poisson.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

ArrivalKind = Literal["poisson", "gamma", "constant"]


def _unit_renewal(kind: ArrivalKind, cv: float, horizon: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a unit-rate renewal process in [0, horizon)."""
    if horizon <= 0:
        return np.empty(0)
    if kind == "constant":
        return np.arange(0.0, horizon, 1.0)
    if kind == "poisson" or (kind == "gamma" and cv == 1.0):
        draw: Callable[[int], np.ndarray] = lambda n: rng.exponential(1.0, n)  # noqa: E731 - one name bound per kind
    elif kind == "gamma":
        shape = 1.0 / (cv * cv)
        draw = lambda n: rng.gamma(shape, 1.0 / shape, n)  # noqa: E731 - as above
    else:  # pragma: no cover - the scenario model only lets the three kinds through
        raise ValueError(f"unknown arrival kind {kind!r}")
    chunks: list[np.ndarray] = []
    t = 0.0
    # Draw in chunks sized to the expected count; a few extra draws are cheap, a Python loop is not.
    n = int(horizon * 1.1) + 16
    while t < horizon:
        gaps = draw(n)
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    out = np.concatenate(chunks)
    return out[out < horizon]


def schedule(
    kind: ArrivalKind,
    rate: float,
    duration_s: float,
    *,
    cv: float = 1.0,
    seed: int = 0,
    step: int = 0,
    ramp_s: float = 0.0,
) -> np.ndarray:
    """Offsets (s from the step start, ascending, all < duration_s) of one step's global schedule.

    With `ramp_s` > 0 the rate rises linearly from 0 to `rate` over the first ramp_s seconds and then
    holds (peak rehearsal): a unit-rate process is generated in "operational time" Λ(t) (the expected
    count by t) and mapped back through Λ⁻¹, which keeps the chosen arrival kind and cv.
    """
    if rate <= 0 or duration_s <= 0:
        return np.empty(0)
    # A seed per (scenario seed, step): reruns are reproducible and steps are independent.
    rng = np.random.default_rng([seed, step])
    ramp_s = min(max(ramp_s, 0.0), duration_s)
    total = rate * (duration_s - ramp_s / 2.0)  # Λ(duration_s)
    unit = _unit_renewal(kind, cv, total, rng)
    if ramp_s == 0:
        return unit / rate
    ramp_mass = rate * ramp_s / 2.0  # Λ(ramp_s)
    in_ramp = unit < ramp_mass
    out = np.empty_like(unit)
    # Λ(t) = rate·t²/(2·ramp_s) on the ramp → t = sqrt(2·ramp_s·u/rate)
    out[in_ramp] = np.sqrt(2.0 * ramp_s * unit[in_ramp] / rate)
    out[~in_ramp] = ramp_s + (unit[~in_ramp] - ramp_mass) / rate
    return out


@dataclass(frozen=True)
class ArrivalPlan:
    """The parameters of one open-loop step's global schedule: every process that has them
    (the master, each worker) generates the same arrivals with `schedule(step_index)`."""

    arrival: ArrivalKind
    rate: float
    duration_s: float
    cv: float = 1.0
    seed: int = 0
    ramp_s: float = 0.0
    # Trace replay: the window's arrivals themselves (offsets, s from the step's start, ascending)
    # and, per arrival, the request it sends (corpus.trace.request_payload). Shipped to workers
    # whole, so a worker needs no copy of the trace file.
    offsets: tuple[float, ...] | list[float] | None = None
    requests: tuple[Any, ...] | list[Any] | None = None
    block_tokens: int = 0
    # Multi-turn sessions: a session's turns all go to one process (corpus.trace.session_shard).
    sessions: bool = False

    def schedule(self, step: int) -> np.ndarray:
        if self.offsets is not None:
            return np.asarray(self.offsets, dtype=float)
        return schedule(self.arrival, self.rate, self.duration_s, cv=self.cv, seed=self.seed, step=step,
                        ramp_s=self.ramp_s)


def shard(offsets: np.ndarray, index: int, count: int) -> np.ndarray:
    """Worker `index` of `count` takes arrivals index, index+count, …: an exact partition."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index} of {count} does not exist")
    return offsets[index::count]


def offered_in_window(offsets: np.ndarray, start: float, end: float) -> int:
    """Arrivals scheduled in [start, end) (offsets relative to the same origin)."""
    return int(np.searchsorted(offsets, end, side="left") - np.searchsorted(offsets, start, side="left"))
