"""A tokenizer.json for the tests, and the simulator's text to count with it.

The tokenizer is a tiny byte-level BPE trained here, offline, on a few sentences: it splits most
simulator words into several tokens, so its count differs from the chunk count and a test can
tell which source was used.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from capacity_plugins.simulator.tokens import output_text

SENTENCES = ["the cat sat on the mat", "a dog and the cat were in the house", "it was the best of times"]


def make_tokenizer(path: Path) -> Path:
    """Train the test tokenizer and save it as `path` (a tokenizer.json)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES, trainer)
    tok.save(str(path))
    return path


def count(path: Path, text: str) -> int:
    """Tokens of `text` under the tokenizer.json at `path`."""
    return len(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)


def sim_text(n: int) -> str:
    """What the simulator generates for n output tokens (reasoning first, then content)."""
    return "".join(output_text(i) for i in range(n))
