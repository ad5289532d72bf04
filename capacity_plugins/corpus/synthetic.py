"""Synthetic corpora: random text of a given estimated length, from a one-line spec.

``synthetic:prompt_tokens=512,output_tokens=128,n=2000,seed=1[,lang=en|zh|mix]`` — the way
`vllm bench serve --dataset-name random` and genai-perf's synthetic inputs are built. Each length
is a number (fixed) or ``fixed(N)``, ``uniform(LO,HI)``, ``normal(MEAN,SD)`` (clamped to ≥ 1).
``output_tokens`` becomes each sample's ``max_tokens`` (pair it with ``--ignore-eos`` for exact
output lengths). The text reuses the built-in corpus's word pools and is as reproducible.
"""

from __future__ import annotations

import random
import re
from typing import Any

from capacity_plugins.corpus.readers import to_jsonl
from capacity_plugins.corpus.words import EN_ADJ, EN_CITIES, EN_NOUNS, EN_TOPICS, EN_VERBS, ZH_CHARS, pick
from capacity_plugins.errors import UserError, did_you_mean

_EN_WORDS = sorted({w.lower() for words in (EN_NOUNS, EN_VERBS, EN_ADJ, EN_CITIES) for w in words}
                   | {w.lower() for t in EN_TOPICS for w in t.split()})


def synthetic_text(rng: random.Random, tokens: int, zh: bool) -> str:
    """Random text of exactly `tokens` estimated tokens (CJK: one char each; else 4 chars each)."""
    tokens = max(1, tokens)
    if zh:
        return "".join(pick(rng, ZH_CHARS) for _ in range(tokens))
    chars = tokens * 4
    words: list[str] = []
    n = 0
    while n < chars:
        w = pick(rng, _EN_WORDS)
        words.append(w)
        n += len(w) + 1
    text = " ".join(words)[:chars]
    # Trailing space would be stripped by some clients; end on a letter.
    return text[:-1] + "x" if text.endswith(" ") else text


_SYNTH_KEYS = ("prompt_tokens", "output_tokens", "n", "seed", "lang")
_DIST_RE = re.compile(r"^(fixed|uniform|normal)\(([^)]*)\)$")


def _parse_synth_spec(src: str) -> dict[str, str]:
    body = src[len("synthetic:"):] if src.startswith("synthetic:") else ""
    out: dict[str, str] = {}
    # Split on commas that are not inside parentheses: normal(512,64) is one value.
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?[^,]*", body):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise UserError(f"{src}: expected key=value, got {part!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in _SYNTH_KEYS:
            hint = did_you_mean(k, _SYNTH_KEYS) or f" (known: {', '.join(_SYNTH_KEYS)})"
            raise UserError(f"{src}: unknown key {k!r}{hint}")
        out[k] = v
    return out


def _length_drawer(spec: str, key: str, src: str) -> Any:
    def bad() -> UserError:
        return UserError(f"{src}: {key}={spec!r} is not a length (use N, fixed(N), uniform(LO,HI) or normal(MEAN,SD))")

    if re.fullmatch(r"\d+", spec):
        n = int(spec)
        return lambda rng: max(1, n)
    m = _DIST_RE.match(spec.replace(" ", ""))
    if not m:
        raise bad()
    try:
        args = [float(a) for a in m.group(2).split(",") if a]
    except ValueError:
        raise bad() from None
    kind = m.group(1)
    if kind == "fixed" and len(args) == 1 and args[0] >= 1:
        n = int(args[0])
        return lambda rng: n
    if kind == "uniform" and len(args) == 2 and 1 <= args[0] <= args[1]:
        lo, hi = int(args[0]), int(args[1])
        return lambda rng: lo + int(rng.random() * (hi - lo + 1))
    if kind == "normal" and len(args) == 2 and args[0] >= 1 and args[1] >= 0:
        mean, sd = args
        return lambda rng: max(1, int(round(rng.gauss(mean, sd))))
    raise bad()


def synthetic_jsonl(src: str) -> bytes:
    """The corpus a ``synthetic:...`` spec describes, as JSONL bytes (deterministic for a spec)."""
    spec = _parse_synth_spec(src)
    prompt_len = _length_drawer(spec.get("prompt_tokens", "512"), "prompt_tokens", src)
    out_len = _length_drawer(spec["output_tokens"], "output_tokens", src) if "output_tokens" in spec else None
    try:
        n = int(spec.get("n", "2000"))
        seed = int(spec.get("seed", "0"))
    except ValueError:
        raise UserError(f"{src}: n and seed must be integers") from None
    if not 1 <= n <= 1_000_000:
        raise UserError(f"{src}: n must be between 1 and 1000000")
    lang = spec.get("lang", "en")
    if lang not in ("en", "zh", "mix"):
        raise UserError(f"{src}: lang must be en, zh or mix")
    rng = random.Random(f"synthetic:{seed}")
    records = []
    for i in range(n):
        zh = lang == "zh" or (lang == "mix" and i % 2 == 1)
        rec: dict[str, Any] = {"id": f"s{i}", "prompt": synthetic_text(rng, prompt_len(rng), zh)}
        if out_len is not None:
            rec["max_tokens"] = out_len(rng)
        records.append(rec)
    return to_jsonl(records)
