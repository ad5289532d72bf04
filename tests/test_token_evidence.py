"""Choosing between the chunk count and a local tokenizer by evidence (servers that send no usage)."""

from __future__ import annotations

import random

from capacity_plugins.client.tokens import MIN_EVIDENCE, TokenCountEvidence


def test_llama_cpp_figures_trust_the_chunks():
    # llama.cpp, max_tokens 64, no usage: the chunk count was exactly 64 every time, re-tokenising the
    # text with the model's own tokenizer gave 64-84
    rng = random.Random(0)
    e = TokenCountEvidence()
    for i in range(20):
        e.observe("length", 64, 64, rng.randint(64, 84))
        if i + 1 < MIN_EVIDENCE:
            assert not e.prefer_chunks  # too little evidence: keep the configured tokenizer
    assert e.prefer_chunks


def test_chunks_of_several_tokens_keep_the_tokenizer():
    e = TokenCountEvidence()
    for _ in range(20):  # a server that streams 4 tokens per chunk: 16 chunks for 64 tokens
        e.observe("length", 64, 16, 64)
    assert not e.prefer_chunks


def test_only_requests_that_ran_to_max_tokens_are_evidence():
    e = TokenCountEvidence()
    for _ in range(20):
        e.observe("stop", 64, 30, 33)  # stopped early: the true count is unknown
        e.observe("length", None, 64, 70)  # no limit asked: nothing to compare with
        e.observe("length", 64, 64, None)  # no tokenizer count
    assert e.length_finished == 0 and not e.prefer_chunks
