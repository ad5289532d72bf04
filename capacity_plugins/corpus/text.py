"""The token estimate and the text of a prompt: the rules every other corpus module counts with.

Token estimate (`estimate_tokens`): each CJK character (ideographs, kana, hangul, CJK and
full-width punctuation) counts 1; the remaining characters count 1 per 4, rounded up. It is only
for describing a corpus and sizing synthetic prompts: the server's own count is the truth.
"""

from __future__ import annotations

import math
import re
from typing import Any

_CJK_RE = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0002fa1f]"
)


def estimate_tokens(text: str) -> int:
    """CJK characters count 1 token each; everything else ≈ 4 characters per token (rounded up)."""
    cjk = len(_CJK_RE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


# The units the estimate counts, in order: one per CJK character, one per run of up to 4 other
# characters (per run, as the embedded simulator counts). Cutting a prompt on these boundaries
# keeps the text before the cut identical, token for token, in every prompt that shares it.
_UNIT_RE = re.compile(f"{_CJK_RE.pattern}|(?:(?!{_CJK_RE.pattern}).){{1,4}}", re.DOTALL)


def token_units(text: str) -> list[str]:
    """The text cut into estimated tokens (joined back, they are the text again)."""
    return _UNIT_RE.findall(text)


def is_cjk_text(text: str) -> bool:
    """Whether a prompt counts as Chinese (etc.) in the language mix: ≥ 30 % CJK among its first
    2000 non-space characters (a Chinese request around an English code snippet still counts)."""
    sample = text[:2000]
    letters = sum(1 for ch in sample if not ch.isspace())
    return letters > 0 and len(_CJK_RE.findall(sample)) / letters >= 0.3


def content_text(content: Any) -> str:
    """The text of one message's `content`: a string, or the text parts of an OpenAI parts list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def messages_text(messages: list[dict[str, Any]] | None) -> str:
    """The messages' contents joined by blank lines (what a prompt-only dialect sends)."""
    return "\n\n".join(content_text(m.get("content")) for m in messages or ())
