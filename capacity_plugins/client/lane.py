"""A workload class's lane: what one request of that class is sent with.

The rehearsal (rehearsal/workloads.py) builds one lane per class and draws which lane each request
takes; the user sends with the lane's settings and prompts, under its name in the live stats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity_plugins.corpus import Sampler
    from capacity_plugins.dialects import RequestParams


@dataclass(frozen=True)
class WorkloadLane:
    name: str
    weight: float
    params: RequestParams
    sampler: Sampler
    request_name: str  # the live stats row (and Locust's request name) of this class
