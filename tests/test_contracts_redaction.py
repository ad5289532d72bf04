"""Secrets.scrub: whole values, and the pieces a cut text keeps of a secret at its edges."""

from __future__ import annotations

import pytest

from capacity_plugins.contracts.redaction import REDACTED, Secrets

KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize("cut", [4, 9, len(KEY) - 1])
def test_a_secret_cut_at_the_end_of_a_text_is_scrubbed(cut):
    text = ("HTTP 401: bad key " + KEY)[: len("HTTP 401: bad key ") + cut]
    assert Secrets([KEY]).scrub(text) == "HTTP 401: bad key " + REDACTED


@pytest.mark.parametrize("cut", [4, 12, len(KEY) - 1])
def test_a_secret_cut_at_the_start_of_a_text_is_scrubbed(cut):
    assert Secrets([KEY]).scrub(KEY[-cut:] + " was refused") == REDACTED + " was refused"


def test_whole_values_everywhere_and_ordinary_text_untouched():
    s = Secrets([KEY])
    assert s.scrub(f"a {KEY} b {KEY}") == f"a {REDACTED} b {REDACTED}"
    assert s.scrub("the key starts with sk-") == "the key starts with sk-"  # a public prefix, 3 characters
    assert s.scrub("nothing to hide") == "nothing to hide"
