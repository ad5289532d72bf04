"""What can be bad input to `capacity run` (and `capacity matrix`, which runs it), checked before
anything starts — no folder, no simulator, no preflight: each problem is one line and exit 2."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from capacity_plugins.contracts.dialects import IMAGE_DIALECTS
from capacity_plugins.contracts.redaction import Secrets, run_secrets
from capacity_plugins.errors import UserError
from capacity_plugins.scenario import Scenario

if TYPE_CHECKING:
    from capacity_plugins.corpus import Corpus


def writable_parent(flag: str, path: Path) -> None:
    """The results go under `path`: it must be (or become) a folder this user can write."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a folder")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{flag} {path}: {probe} is not a folder")
    try:  # permissions alone do not tell (root, read-only mounts, /proc): try, and leave nothing behind
        os.rmdir(tempfile.mkdtemp(prefix=".capacity-probe-", dir=probe))
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot create a results folder there ({e.strerror})") from None


def check_corpus(s: Scenario) -> None:
    """Load the corpus once here so a bad one is exit 2 before a simulator or a preflight starts."""
    from capacity_plugins.corpus import load_corpus

    where = f"{s.source_path}: " if s.source_path else ""
    try:
        corpus = load_corpus(s.corpus_path(), min_distinct=s.corpus.min_distinct)
    except UserError as e:
        raise UserError(f"{where}corpus: {e}") from None
    _images_sendable(corpus, s.target.dialect, f"{where}corpus")
    for i, (w, merged) in enumerate(zip(s.workloads or (), s.workload_classes, strict=True)):
        own = s.class_corpus_path(w)
        if own is None and merged.corpus.min_distinct == s.corpus.min_distinct:
            continue  # the top-level corpus, checked above
        try:
            corpus = load_corpus(own or s.corpus_path(), min_distinct=merged.corpus.min_distinct)
        except UserError as e:
            raise UserError(f"{where}workloads[{i}].corpus: {e}") from None
        _images_sendable(corpus, s.target.dialect, f"{where}workloads[{i}].corpus")


def _images_sendable(corpus: Corpus, dialect: str, where: str) -> None:
    """A corpus that names images needs a dialect that sends them; Ollama's `images` take no URL."""
    first = next((x for x in corpus.samples if x.images), None)
    if first is None:
        return
    if dialect not in IMAGE_DIALECTS:
        raise UserError(f"{where}: {corpus.source}: prompt {first.id!r} names images, which the {dialect} dialect "
                        f"cannot send (use one of {', '.join(IMAGE_DIALECTS)})")
    if dialect == "ollama":
        url = next((x for x in corpus.samples if any(im.url for im in x.images)), None)
        if url is not None:
            raise UserError(f"{where}: {corpus.source}: prompt {url.id!r} names an image by URL; Ollama takes "
                            "images as data only (name a file instead)")


def scenario_secrets(s: Scenario) -> Secrets:
    """The secret values of a scenario's target (UserError, exit 2, when one is too short)."""
    key = os.environ.get(s.target.api_key_env) if s.target.api_key_env else None
    return run_secrets(key, s.target.headers, s.target.url, api_key_what=f"target.api_key_env {s.target.api_key_env}")
