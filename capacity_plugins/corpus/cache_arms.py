"""The cache arm of a prefix-cache probe (load kind `cache_probe`): prompts built from the corpus
that a server's prefix cache can serve, sent beside the corpus's own distinct prompts.

| arm | each prompt |
|---|---|
| `shared_prefix` | a corpus prompt whose first `prefix_tokens` estimated tokens are replaced by one prefix common to the whole arm. A prompt not longer than that keeps its last `MIN_TAIL_TOKENS` tokens and shares the rest. Lengths stay the corpus's, token for token, so a difference between the arms is the cache's, not more or less prefill |
| `repeat` | one of `pool_size` corpus prompts, in turn: exact repeats |

The common prefix (and every repeated prompt) begins with `PROBE_TAG`, a line no corpus prompt
begins with: the distinct arm can then never find blocks the cache arm left cached, and its hit
rate stays what the corpus alone gives. These prompts repeat on purpose, so the arm is exempt from
`min_distinct` (the corpus itself is still checked: the distinct arm is the one that counts).

Deterministic from (corpus, spec, shard): every worker builds the same prefix and the same pool
from its own copy of the corpus (the handshake checked it is the master's), and takes the
tails of its own shard, as the distinct arm does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from capacity_plugins.contracts.options import REHEARSAL
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.sampler import Sampler, SampleSource
from capacity_plugins.corpus.text import token_units
from capacity_plugins.errors import UserError

CacheArm = Literal["shared_prefix", "repeat"]
CACHE_ARMS: tuple[str, ...] = ("shared_prefix", "repeat")
# The step label of the corpus's own prompts (steps.json `arm`).
DISTINCT = "distinct"
# 40 characters: whole 4-character units, so text after it is cut into units as it would be alone.
PROBE_TAG = "[capacity cache probe: shared context]\n\n"
# A shared-prefix prompt keeps at least this many tokens of its own: it stays a distinct request
# (not an exact repeat), and the last block before its tail is the only one it cannot share.
MIN_TAIL_TOKENS = 16


@dataclass(frozen=True)
class ArmSpec:
    """How the cache arm is built; travels to every generator process with its steps."""

    arm: CacheArm
    prefix_tokens: int = 1024  # shared_prefix: tokens of the common prefix
    pool_size: int = 8  # repeat: prompts in the pool
    seed: int = REHEARSAL.seed  # corpus.seed: the prefix's text and the pool are drawn with it

    def __post_init__(self) -> None:
        if self.arm not in CACHE_ARMS:
            raise UserError(f"cache arm {self.arm!r} unknown (choose from {', '.join(CACHE_ARMS)})")
        if self.prefix_tokens < 1 or self.pool_size < 1:
            raise UserError("cache arm: prefix_tokens and pool_size must be positive")

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> ArmSpec:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def shared_prefix_units(corpus: SampleSource, tokens: int, seed: int) -> list[str]:
    """The common prefix, `tokens` units long: PROBE_TAG, then corpus prompts in a seeded order."""
    order = list(range(len(corpus.samples)))
    random.Random(f"cache-probe-prefix:{seed}").shuffle(order)
    parts, have, i = [PROBE_TAG], len(token_units(PROBE_TAG)), 0
    while have < tokens and order:
        text = corpus.samples[order[i % len(order)]].text + "\n\n"
        parts.append(text)
        have += len(token_units(text))
        i += 1
    # Cut from the whole text (not part by part): units are what any prompt starting with it gets.
    return token_units("".join(parts))[:tokens]


def shared_length(prompt_units: int, prefix_tokens: int) -> int:
    """How many leading units of a prompt this long the shared prefix replaces."""
    return max(0, min(prefix_tokens, prompt_units - MIN_TAIL_TOKENS))


def with_shared_prefix(sample: Sample, prefix: Sequence[str]) -> Sample:
    """The sample with its head replaced by the prefix (one text: messages become one prompt)."""
    units = token_units(sample.text)
    k = shared_length(len(units), len(prefix))
    return Sample.make(f"{sample.id}+prefix", prompt="".join(prefix[:k]) + "".join(units[k:]),
                       max_tokens=sample.max_tokens)


class SharedPrefixArm:
    """Corpus prompts of this process's shard, each behind the common prefix."""

    def __init__(self, corpus: SampleSource, spec: ArmSpec, shard_index: int = 0, shard_count: int = 1) -> None:
        self.prefix = shared_prefix_units(corpus, spec.prefix_tokens, spec.seed)
        # The same seed and shard as the distinct arm: the arms send the same prompts in the same
        # order (one with its head replaced), so their lengths pair up step for step.
        self._tails = Sampler(corpus, mode="shuffle", seed=spec.seed, shard_index=shard_index,
                              shard_count=shard_count)

    def next(self) -> Sample:
        return with_shared_prefix(self._tails.next(), self.prefix)


class RepeatArm:
    """A pool of `pool_size` tagged corpus prompts, the same on every process, sent in turn."""

    def __init__(self, corpus: SampleSource, spec: ArmSpec, shard_index: int = 0, shard_count: int = 1) -> None:
        samples = corpus.samples
        picked = random.Random(f"cache-probe-pool:{spec.seed}").sample(range(len(samples)),
                                                                        min(spec.pool_size, len(samples)))
        self.pool = [Sample.make(f"{samples[i].id}#repeat", prompt=PROBE_TAG + samples[i].text,
                                 max_tokens=samples[i].max_tokens) for i in picked]
        self._pos = shard_index % len(self.pool)  # processes start at different prompts of the pool

    def next(self) -> Sample:
        s = self.pool[self._pos]
        self._pos = (self._pos + 1) % len(self.pool)
        return s


def build_arm(corpus: SampleSource, spec: ArmSpec, shard_index: int = 0,
              shard_count: int = 1) -> SharedPrefixArm | RepeatArm:
    if not corpus.samples:
        raise UserError(f"corpus {corpus.source}: empty, no cache arm can be built from it")
    if spec.arm == "shared_prefix":
        return SharedPrefixArm(corpus, spec, shard_index, shard_count)
    return RepeatArm(corpus, spec, shard_index, shard_count)


def describe(corpus: SampleSource, spec: ArmSpec) -> dict[str, Any]:
    """What the cache arm shares, estimated from the corpus (steps.json `cache_probe`)."""
    out: dict[str, Any] = {**asdict(spec), "tag": PROBE_TAG.strip()}
    lengths = [len(token_units(s.text)) for s in corpus.samples]
    if not lengths:
        return out
    if spec.arm == "shared_prefix":
        shared = [shared_length(n, spec.prefix_tokens) for n in lengths]
        out["shared_tokens_mean"] = sum(shared) / len(shared)
        out["prompt_tokens_mean"] = sum(lengths) / len(lengths)
        # Prompts long enough to carry the whole prefix and a tail of their own.
        out["full_prefix_share"] = sum(1 for k in shared if k == spec.prefix_tokens) / len(shared)
    else:
        out["pool"] = min(spec.pool_size, len(lengths))
    return out
