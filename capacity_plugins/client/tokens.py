"""Which output-token count to trust when the server reports none (no usage, no eval_count).

Two counts exist then: the client's chunk count (exact when the server streams one token per
chunk, as llama.cpp does) and a local tokenizer's re-count of the generated text (exact only if
it is the model's own tokenizer and the text decodes back to the same tokens — re-tokenising
llama.cpp's 64-token outputs with the model's tokenizer gave 64 to 84). Evidence decides: a
request that ended because it reached max_tokens (`finish_reason: length`) generated exactly
max_tokens tokens, so whichever count matches it on (nearly) every such request is the exact one
for this server. Until there is evidence the tokenizer is used (it is what the user configured).
Both counts are kept in every record (`client_output_tokens`, `tokenizer_output_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Requests that ran to max_tokens needed before the evidence may overrule the tokenizer.
MIN_EVIDENCE = 5
# Share of those on which a count must equal max_tokens to be called exact.
EXACT_SHARE = 0.95
# Chunk and tokenizer counts further apart than this (relative) are a disagreement worth saying.
DISAGREEMENT = 0.10


@dataclass
class TokenCountEvidence:
    """Per generating process: how often each count matched max_tokens on length-finished requests."""

    length_finished: int = 0
    chunks_exact: int = 0
    tokenizer_exact: int = 0

    def observe(self, finish_reason: str | None, max_tokens: int | None, chunks: int | None,
                tokenizer: int | None) -> None:
        if finish_reason != "length" or not max_tokens or chunks is None or tokenizer is None:
            return
        self.length_finished += 1
        self.chunks_exact += chunks == max_tokens
        self.tokenizer_exact += tokenizer == max_tokens

    @property
    def prefer_chunks(self) -> bool:
        n = self.length_finished
        if n < MIN_EVIDENCE:
            return False
        return self.chunks_exact / n >= EXACT_SHARE and self.chunks_exact > self.tokenizer_exact


class TokenCountAudit:
    """On the writing process: how far chunk and tokenizer counts disagree over the run (meta.json)."""

    def __init__(self) -> None:
        self.both = 0
        self.disagree = 0
        self.evidence = TokenCountEvidence()

    def add(self, record: Any) -> None:
        tok = getattr(record, "tokenizer_output_tokens", None)
        if tok is None or not record.stream:
            return
        chunks = record.client_output_tokens if record.client_output_tokens is not None else record.output_tokens
        if chunks is None:
            return
        self.both += 1
        if abs(chunks - tok) > DISAGREEMENT * max(chunks, tok, 1):
            self.disagree += 1
        self.evidence.observe(record.finish_reason, record.max_tokens, chunks, tok)

    def summary(self) -> dict[str, Any] | None:
        if not self.both:
            return None
        e = self.evidence
        return {
            "records_with_both_counts": self.both,
            "disagree_over_10pct": self.disagree,
            "length_finished": e.length_finished,
            "chunks_exact_at_length": e.chunks_exact,
            "tokenizer_exact_at_length": e.tokenizer_exact,
            "trusted": "chunks" if e.prefer_chunks else "tokenizer",
        }
