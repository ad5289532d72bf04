"""Moved to `capacity_plugins.corpus.builtin` (and `.words`, `.synthetic`); re-exported for old imports."""

from capacity_plugins.corpus.builtin import (
    BUILTIN_COUNT,
    BUILTIN_FILE,
    BUILTIN_SEED,
    DATA_DIR,
    LONG_TARGETS,
    build_builtin,
    builtin_records,
    gzip_bytes,
    long_records,
)
from capacity_plugins.corpus.readers import to_jsonl
from capacity_plugins.corpus.synthetic import synthetic_text
from capacity_plugins.corpus.words import (
    EN_ADJ,
    EN_AUDIENCES,
    EN_CITIES,
    EN_FORMATS,
    EN_NOUNS,
    EN_PEOPLE,
    EN_TOOLS,
    EN_TOPICS,
    EN_VERBS,
    ZH_ADJ,
    ZH_AUDIENCES,
    ZH_CHARS,
    ZH_CITIES,
    ZH_FORMATS,
    ZH_NOUNS,
    ZH_PEOPLE,
    ZH_TOPICS,
    ZH_VERBS,
)

__all__ = [
    "BUILTIN_COUNT", "BUILTIN_FILE", "BUILTIN_SEED", "DATA_DIR", "EN_ADJ", "EN_AUDIENCES", "EN_CITIES",
    "EN_FORMATS", "EN_NOUNS", "EN_PEOPLE", "EN_TOOLS", "EN_TOPICS", "EN_VERBS", "LONG_TARGETS", "ZH_ADJ",
    "ZH_AUDIENCES", "ZH_CHARS", "ZH_CITIES", "ZH_FORMATS", "ZH_NOUNS", "ZH_PEOPLE", "ZH_TOPICS", "ZH_VERBS",
    "build_builtin", "builtin_records", "gzip_bytes", "long_records", "synthetic_text", "to_jsonl",
]
