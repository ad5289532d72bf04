"""`load_corpus(source)`: a source spec → a validated `Corpus`.

Sources: ``builtin`` (the shipped file), ``builtin:long`` (generated on demand, exempt from
`min_distinct`), ``synthetic:...`` (`synthetic`), or a file (`readers`). Validation: at least
`min_distinct` distinct prompts (default 1000, the method's minimum: repeated prompts hit the
server's prefix cache and flatter every latency). Errors raise one-line `UserError`s.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
from pathlib import Path

from capacity_plugins.corpus.builtin import BUILTIN_FILE, DATA_DIR, long_records
from capacity_plugins.corpus.collection import Corpus
from capacity_plugins.corpus.readers import parse_jsonl, read_file, to_jsonl
from capacity_plugins.corpus.synthetic import synthetic_jsonl
from capacity_plugins.errors import UserError

DEFAULT_MIN_DISTINCT = 1000


def load_corpus(source: str | Path, *, min_distinct: int = DEFAULT_MIN_DISTINCT,
                max_tokens_field: bool = True) -> Corpus:
    src = str(source)
    if src == "builtin":
        corpus = _load_builtin()
    elif src == "builtin:long":
        corpus = _generated(to_jsonl(long_records()), "builtin:long", exempt_min_distinct=True)
    elif src.startswith("synthetic:") or src == "synthetic":
        # The canonical content (not the spec text) is hashed, so equal specs written differently match.
        corpus = _generated(synthetic_jsonl(src), src)
    else:
        samples, digest = read_file(Path(source), src)
        corpus = Corpus(samples, src, digest)
    if not max_tokens_field:
        corpus.samples = [
            s if s.max_tokens is None else dataclasses.replace(s, max_tokens=None)
            for s in corpus.samples
        ]
    if not corpus.samples:
        raise UserError(f"{src}: empty corpus (no prompts)")
    if not corpus.exempt_min_distinct:
        distinct = corpus.distinct_count()
        if distinct < min_distinct:
            raise UserError(
                f"{src}: only {distinct} distinct prompts ({len(corpus.samples)} in total), fewer than the "
                f"required {min_distinct}: repeated prompts hit the server's prefix cache and flatter latency; "
                f"add prompts, or lower the limit with --min-distinct N (min_distinct in a scenario)"
            )
    return corpus


def _load_builtin() -> Corpus:
    path = DATA_DIR / BUILTIN_FILE
    if not path.exists():
        raise UserError(f"builtin corpus missing at {path}; regenerate it with `capacity corpus build`")
    return _generated(gzip.decompress(path.read_bytes()), "builtin")


def _generated(data: bytes, label: str, *, exempt_min_distinct: bool = False) -> Corpus:
    """A generated set's JSONL read back like a file; its SHA-256 is of the uncompressed JSONL."""
    samples = parse_jsonl(data, label, max_tokens_field=True)
    return Corpus(samples, label, hashlib.sha256(data).hexdigest(), exempt_min_distinct=exempt_min_distinct)
