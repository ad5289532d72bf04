"""Reading the embedded simulator's /metrics (the simulator itself: capacity_plugins.simulator.launch)."""

from __future__ import annotations

from capacity_plugins.simulator.rawclient import request
from helpers import prometheus
from helpers.prometheus import Samples

SIM_MODEL = "sim-model"


def scrape(port: int) -> Samples:
    return prometheus.parse(request(port, "GET", "/metrics").body.decode())


def metric(samples: Samples, name: str, /, **labels: str) -> float:
    """A sample of the simulator's /metrics; vLLM-named ones are matched for its model by default."""
    want = labels if name.startswith(("DCGM", "nv_")) else {"model_name": SIM_MODEL, **labels}
    return prometheus.metric(samples, name, **want)


# A simulator whose TTFT grows with load (small batch, noticeable decode step): for the live views,
# where numbers must move while a test watches them. A module sets `SIMULATOR = LOADED`.
LOADED = {"max_num_seqs": 4, "decode_base_ms": 6.0, "decode_per_seq_ms": 2.0}
