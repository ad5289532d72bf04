"""Prompt corpora: load, validate, describe, and hand out samples to users without repeats.

Sources (`load_corpus(source)`):

- ``builtin`` — the shipped corpus (`data/builtin.jsonl.gz`, 6000 distinct prompts, Chinese and
  English, short questions to multi-section documents; distribution in `builtin` and
  `data/README.md`). ``builtin:long`` — the long-context boundary set (≈ 8k / 16k / 32k
  estimated tokens, four prompts each), generated on demand; it is exempt from `min_distinct`.
- a file: ``.jsonl`` (also ``.jsonl.gz``), ``.csv``, ShareGPT or prompt-list ``.json``,
  ``.parquet`` (formats in `readers`).
- ``synthetic:prompt_tokens=512,output_tokens=128,n=2000,seed=1[,lang=en|zh|mix]`` — random text
  of a given estimated length (`synthetic`).

Validation: at least `min_distinct` distinct prompts (default 1000, the method's minimum: repeated
prompts hit the server's prefix cache and flatter every latency). Errors raise `UserError` with
the file and line (``corpus.jsonl:17: missing "prompt" or "messages"``).

Token estimate (`estimate_tokens`, `text`): each CJK character counts 1; the remaining characters
count 1 per 4, rounded up. Only for describing a corpus and sizing synthetic prompts.

Sampling (`Corpus.sampler`, `sampler`): each worker takes a disjoint shard of one seeded
permutation; ``shuffle`` (default), ``sequential`` or ``random``; each wrap is counted and logged.

Modules, each importing only those above it (no cycles; tests/test_corpus.py checks it):

| module | owns |
|---|---|
| `text` | the token estimate, CJK detection, the text of a message list |
| `words` | the word pools and seeded draws of the generated corpora |
| `images` | the images a prompt names (checked at load, encoded when first sent), synthetic images |
| `sample` | `Sample`, one prompt |
| `stats` | what `capacity corpus stats` reports (percentiles from `contracts.percentiles`) |
| `sampler` | `Sampler`: shards, modes, wraps |
| `collection` | `Corpus`: samples + SHA-256, `stats()`, `sampler()` |
| `readers` | the file formats, and the JSONL form the generated sets are hashed in |
| `builtin` | the built-in and long-context sets and their reproducible build |
| `synthetic` | ``synthetic:...`` specs and their text |
| `loader` | `load_corpus`: source spec → validated `Corpus` |
| `cache_arms` | a prefix-cache probe's cache arm built from a corpus: shared prefix or repeats |
| `cli` | `capacity corpus stats|build` |
"""

from __future__ import annotations

from capacity_plugins.corpus.collection import Corpus
from capacity_plugins.corpus.loader import DEFAULT_MIN_DISTINCT, load_corpus
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.sampler import SAMPLING_MODES, Sampler
from capacity_plugins.corpus.stats import LONG_PREFIX_TOKENS
from capacity_plugins.corpus.text import estimate_tokens

__all__ = [
    "DEFAULT_MIN_DISTINCT",
    "LONG_PREFIX_TOKENS",
    "SAMPLING_MODES",
    "Corpus",
    "Sample",
    "Sampler",
    "estimate_tokens",
    "load_corpus",
]
