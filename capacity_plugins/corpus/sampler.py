"""Handing out a corpus's samples to users: one disjoint shard per generator process.

Each worker takes the shard ``(shard_index, shard_count)`` of one seeded permutation of the
corpus, so shards are disjoint and together cover every prompt; no prompt is sent twice across
the swarm until a shard is exhausted. ``shuffle`` (default) walks the shard in seeded random
order and reshuffles it with a derived seed on each wrap; ``sequential`` walks it in file order;
``random`` draws from it with replacement. Each wrap is counted and logged as a warning.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Protocol

from capacity_plugins.contracts.options import REHEARSAL, SAMPLING_MODES
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.errors import UserError

# The package's name, as before the split: operators filter the wrap warning by this logger.
logger = logging.getLogger("capacity_plugins.corpus")


class SampleSource(Protocol):
    """What a sampler reads from a corpus (`Corpus`): its samples and the name it was loaded as."""

    @property
    def samples(self) -> Sequence[Sample]: ...

    @property
    def source(self) -> str: ...


class Sampler:
    """Hands out the samples of one shard; see the module docstring for the modes.

    Not thread-safe across OS threads; fine for gevent greenlets (no yield inside `next`).
    """

    def __init__(self, corpus: SampleSource, *, mode: str = REHEARSAL.sampling, seed: int = REHEARSAL.seed,
                 shard_index: int = 0, shard_count: int = 1) -> None:
        if mode not in SAMPLING_MODES:
            raise UserError(f"sampling mode {mode!r} unknown (choose from {', '.join(SAMPLING_MODES)})")
        if shard_count < 1 or not 0 <= shard_index < shard_count:
            raise UserError(f"corpus shard {shard_index} of {shard_count} is not valid")
        n = len(corpus.samples)
        if n < shard_count:
            raise UserError(f"corpus {corpus.source} has {n} prompts, fewer than the {shard_count} workers sharing it")
        self.corpus = corpus
        self.mode = mode
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        order = list(range(n))
        if mode != "sequential":
            # One permutation for the whole swarm (same seed everywhere), then a strided slice:
            # the shards are disjoint and their union is the corpus.
            random.Random(f"corpus-shards:{seed}").shuffle(order)
        self._shard = order[shard_index::shard_count]
        self._rng = random.Random(f"corpus-draw:{seed}:{shard_index}")
        self._order = list(self._shard)
        if mode == "shuffle":
            self._rng.shuffle(self._order)
        self._pos = 0
        self.wraps = 0
        self.sent = 0

    @property
    def shard_size(self) -> int:
        return len(self._shard)

    def next(self) -> Sample:
        samples = self.corpus.samples
        self.sent += 1
        if self.mode == "random":
            return samples[self._shard[int(self._rng.random() * len(self._shard))]]
        if self._pos >= len(self._order):
            self.wraps += 1
            self._pos = 0
            if self.mode == "shuffle":
                self._order = list(self._shard)
                random.Random(f"corpus-wrap:{self.seed}:{self.shard_index}:{self.wraps}").shuffle(self._order)
            logger.warning(
                "corpus %s: shard %d/%d (%d prompts) exhausted after %d sent; starting again (wrap %d) — "
                "repeated prompts may hit the server's prefix cache; use a larger corpus",
                self.corpus.source, self.shard_index, self.shard_count, len(self._shard),
                self.sent - 1, self.wraps,
            )
        s = samples[self._order[self._pos]]
        self._pos += 1
        return s

    __next__ = next

    def __iter__(self) -> Sampler:
        return self

