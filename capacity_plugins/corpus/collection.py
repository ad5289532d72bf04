"""`Corpus`: the loaded samples and their identity (the SHA-256 workers compare with the master)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capacity_plugins.contracts.options import REHEARSAL
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.sampler import Sampler
from capacity_plugins.corpus.stats import describe


@dataclass
class Corpus:
    samples: list[Sample]
    source: str
    sha256: str
    exempt_min_distinct: bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return len(self.samples)

    def distinct_count(self) -> int:
        return len({s.identity for s in self.samples})  # the same text with other images is another prompt

    def stats(self) -> dict[str, Any]:
        return describe(self.samples, self.source, self.sha256)

    def sampler(self, mode: str = REHEARSAL.sampling, seed: int = REHEARSAL.seed, shard_index: int = 0, shard_count: int = 1) -> Sampler:
        return Sampler(self, mode=mode, seed=seed, shard_index=shard_index, shard_count=shard_count)
