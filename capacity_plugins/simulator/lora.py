"""LoRA adapters on the simulated GPU, as vLLM serves them (`--lora-modules`, `--max-loras`).

`lora_adapters: N` serves N adapters beside the base model, named `lora-1` … `lora-N`: a request
names one as its `model` (the OpenAI API; vLLM lists them in /v1/models with the base model as
`parent`). Two rules shape their cost, as in vLLM's scheduler and its GPU adapter cache:

- **At most `max_loras` adapters in one batch.** A waiting request whose adapter is not in the
  running batch joins only while the batch holds fewer than `max_loras` distinct adapters;
  otherwise it stays in the queue and later requests may overtake it (vLLM's scheduler skips it
  the same way). Base-model requests are never held back.
- **`max_loras` GPU slots, least recently used out.** An adapter not in a slot when its request
  joins is loaded into one — the least recently used slot not serving the batch — and the step
  it joins in lasts `lora_swap_ms` longer per adapter loaded (the load stalls everyone, like a
  prefill).

So with one request at a time and K adapters drawn uniformly, a request finds its adapter loaded
with probability min(1, max_loras / K) (LRU under independent uniform draws) and its TTFT is the
base model's plus `lora_swap_ms` × (1 − that): the closed form the end-to-end test checks. With
more adapters in use than `max_loras`, batches also hold fewer requests than `max_num_seqs`
allows, so the mix's capacity falls below the base model's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from capacity_plugins.simulator.config import SimConfig


def adapter_names(config: SimConfig) -> list[str]:
    return [f"lora-{i}" for i in range(1, config.lora_adapters + 1)]


class _HasAdapter(Protocol):
    adapter: str | None


class AdapterSlots:
    """The GPU's adapter slots and the batch rule (module doc); the engine asks it per step."""

    def __init__(self, config: SimConfig) -> None:
        self.max_loras = config.max_loras
        self.swap_s = config.lora_swap_ms / 1000.0
        self.names = frozenset(adapter_names(config))
        self.loaded: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self.loads = 0  # adapters loaded into a slot since start (simulator_lora_loads_total)

    def may_join(self, adapter: str | None, in_batch: set[str]) -> bool:
        return adapter is None or adapter in in_batch or len(in_batch) < self.max_loras

    def load(self, adapter: str | None, in_batch: set[str]) -> float:
        """The request with `adapter` joins the batch: the seconds its load stalls the step (0 if loaded)."""
        if adapter is None:
            return 0.0
        if adapter in self.loaded:
            self.loaded.move_to_end(adapter)
            return 0.0
        if len(self.loaded) >= self.max_loras:
            # may_join let it in, so fewer than max_loras adapters serve the batch: one slot is free of them
            victim = next(a for a in self.loaded if a not in in_batch)
            del self.loaded[victim]
        self.loaded[adapter] = None
        self.loads += 1
        return self.swap_s


def adapters_of(seqs: Iterable[_HasAdapter]) -> set[str]:
    return {s.adapter for s in seqs if s.adapter is not None}
