"""The simulated GPU's readings as functions of batch occupancy, shared by the DCGM and Triton series.

Power is 60 W idle + 240 W × utilisation (limit 300 W); framebuffer use is constant at 90 % of
`gpu_memory_mib` because vLLM / TensorRT-LLM preallocate their KV cache. One UUID names the card
in both exporters' labels, so the two views of the one simulated GPU can be joined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity_plugins.simulator.config import SimConfig

GPU_UUID = "GPU-00000000-0000-0000-0000-5133554c4154"
IDLE_POWER_W = 60.0
POWER_LIMIT_W = 300.0
MIB = 2**20


def gpu_power_w(util: float) -> float:
    return round(IDLE_POWER_W + (POWER_LIMIT_W - IDLE_POWER_W) * util, 3)


def gpu_used_mib(config: SimConfig) -> int:
    return int(config.gpu_memory_mib * 0.9)
