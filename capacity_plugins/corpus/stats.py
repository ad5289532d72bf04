"""What `capacity corpus stats` reports about a corpus: size, duplicates, shared long prefixes,
length percentiles (nearest rank, `contracts.percentiles`), language mix, and for a corpus that
names images, images per prompt, their resolutions and their estimated prompt tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capacity_plugins.contracts.images import DEFAULT_TILES, TileRule
from capacity_plugins.contracts.percentiles import nearest_rank, quantile
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.text import estimate_tokens, is_cjk_text

# A prefix shorter than this (estimated tokens) is shared harmlessly (a greeting, "Summarise:");
# longer shared prefixes let the server's prefix cache skip prefill, which flatters TTFT.
LONG_PREFIX_TOKENS = 128


def _percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {"min": s[0], "p10": nearest_rank(s, 0.10), "p50": nearest_rank(s, 0.50), "p90": nearest_rank(s, 0.90),
            "p99": nearest_rank(s, 0.99), "max": s[-1], "mean": round(sum(s) / len(s), 1)}


def long_prefix(text: str) -> str | None:
    """The first LONG_PREFIX_TOKENS estimated tokens of text, or None when it is shorter."""
    head = text[: LONG_PREFIX_TOKENS * 4]
    if estimate_tokens(head) < LONG_PREFIX_TOKENS:
        return None
    # The estimate grows with the prefix length: binary-search the shortest prefix reaching it.
    lo, hi = 1, len(head)
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate_tokens(head[:mid]) >= LONG_PREFIX_TOKENS:
            hi = mid
        else:
            lo = mid + 1
    return head[:lo]


def describe(samples: Sequence[Sample], source: str, sha256: str) -> dict[str, Any]:
    """The stats object (`Corpus.stats()`, `capacity corpus stats --json`)."""
    texts = [s.text for s in samples]
    distinct = {s.identity for s in samples}  # the same text with other images is another prompt
    groups: dict[str, int] = {}
    for t in set(texts):
        p = long_prefix(t)
        if p is not None:
            groups[p] = groups.get(p, 0) + 1
    shared = [n for n in groups.values() if n > 1]
    zh = sum(1 for t in texts if is_cjk_text(t))
    with_max = [s.max_tokens for s in samples if s.max_tokens is not None]
    out: dict[str, Any] = {
        "source": source,
        "sha256": sha256,
        "count": len(texts),
        "distinct": len(distinct),
        "duplicates": len(texts) - len(distinct),
        "messages_samples": sum(1 for s in samples if s.messages is not None),
        "shared_long_prefix": {
            "prefix_tokens_est": LONG_PREFIX_TOKENS,
            "groups": len(shared),
            "prompts": sum(shared),
            "largest_group": max(shared, default=0),
        },
        "prompt_chars": _percentiles([s.prompt_chars for s in samples]),
        "prompt_tokens_est": _percentiles([s.prompt_tokens_est for s in samples]),
        "languages": {"zh": round(zh / len(texts), 4) if texts else 0.0,
                      "en": round(1 - zh / len(texts), 4) if texts else 0.0},
        "max_tokens": {"samples_with": len(with_max), **({"p50": quantile(with_max, 0.50)} if with_max else {})},
    }
    if any(s.images for s in samples):
        out["images"] = describe_images(samples)
    return out


def describe_images(samples: Sequence[Sample], rule: TileRule = DEFAULT_TILES) -> dict[str, Any]:
    """Images per prompt, their resolutions (the most common first) and the prompt tokens they add
    by the tile rule (contracts/images.py, the simulator's defaults); a URL, whose size the client
    does not know, counts one tile (as the simulator charges it)."""
    sizes: dict[str, int] = {}
    tokens = []
    for s in samples:
        n = 0
        for im in s.images:
            key = im.size or "unknown (URL)"
            sizes[key] = sizes.get(key, 0) + 1
            n += rule.tokens_per_tile if im.width is None or im.height is None else rule.tokens(im.width, im.height)
        tokens.append(n)
    top = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "prompts_with": sum(1 for s in samples if s.images),
        "total": sum(sizes.values()),
        "per_prompt": _percentiles([len(s.images) for s in samples]),
        "resolutions": dict(top[:8]),
        "other_resolutions": sum(n for _k, n in top[8:]),
        "image_tokens_est": _percentiles(tokens),
        "tile_rule": {"tile_px": rule.tile_px, "tokens_per_tile": rule.tokens_per_tile, "max_tiles": rule.max_tiles},
    }
