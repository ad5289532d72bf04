"""How the simulator counts prompt tokens and spells output tokens.

Prompt rule (no tokenizer, so it is cheap and the same on every machine): each CJK character
(kana, Hangul, CJK ideographs) is one token; every other run of text counts one token per 4
characters, rounded up per run. A chat request adds 3 template tokens per message plus 3 for
the assistant turn, like a typical chat template. The units this rule cuts are also what the
prefix cache hashes, in blocks of `block_size` tokens chained from the start of the prompt.

Output tokens are words from a fixed list (each with a leading space), one word per token, so
a client counting chunks and the server's usage agree.
"""

from __future__ import annotations

import hashlib
import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_UNITS = re.compile(f"[{_CJK}]|[^{_CJK}]{{1,4}}")

CHAT_TOKENS_PER_MESSAGE = 3
CHAT_TOKENS_REPLY = 3

WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "at", "by", "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were", "all", "we", "her", "she", "there", "would", "their", "will", "when", "who", "him", "been", "has", "more", "if", "no", "out", "do", "so", "can", "what", "up", "said", "about", "other", "into", "than", "its", "time", "only", "could", "new", "them", "man", "some", "these", "then", "two", "first", "may", "any", "like", "now", "my", "such", "make", "over", "our", "even", "most", "me", "state", "after", "also", "made", "many", "did", "must", "before", "back", "see", "through", "way", "where", "get", "much", "go", "well", "your", "know", "should", "down", "work", "year", "because", "come", "people", "just", "say", "each", "those", "take", "day", "good", "how", "long"]
TOKEN_TEXTS = tuple(" " + w for w in WORDS)


def prompt_units(text: str) -> list[str]:
    return _UNITS.findall(text)


def count_tokens(text: str) -> int:
    return len(_UNITS.findall(text))


def block_hashes(units: list[str], block_size: int) -> list[bytes]:
    """Chained hashes of the full blocks of a prompt (a block's hash covers all before it)."""
    out: list[bytes] = []
    h = b""
    for start in range(0, len(units) - block_size + 1, block_size):
        h = hashlib.blake2b(h + "\x00".join(units[start : start + block_size]).encode(), digest_size=12).digest()
        out.append(h)
    return out


def output_text(index: int) -> str:
    return TOKEN_TEXTS[index % len(TOKEN_TEXTS)]


def texts(first: int, last: int) -> str:
    """The text of output tokens first..last (1-based, inclusive)."""
    if first == last:
        return TOKEN_TEXTS[(first - 1) % len(TOKEN_TEXTS)]
    return "".join(output_text(i - 1) for i in range(first, last + 1))
