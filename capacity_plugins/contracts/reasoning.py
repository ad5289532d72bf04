"""summary.json's `reasoning`: how much of each answer was thinking, and what the reader waited for.

A reasoning model spends output tokens on a channel the user does not see (`reasoning_content` /
`reasoning` / `thinking`) before the visible answer. The records count both (contracts/records.py:
`reasoning_tokens`, `visible_output_tokens`, `first_visible_ms`, `tpot_visible_ms`); this section
is their account per step, written by analysis/reasoning.py when any record had reasoning.
"""

from __future__ import annotations

from pydantic import Field

from capacity_plugins.contracts.document import Interval, Section


class ReasoningStep(Section):
    """One load step's thinking, over its successful measured requests."""

    step: int = 0
    level: float = 0.0
    requests: int = 0
    """Successful measured requests."""
    reasoning_requests: int = 0
    """Of those, the ones whose record says how much they reasoned (`reasoning_tokens` not null)."""
    reasoning_tokens_mean: float | None = None
    visible_output_tokens_mean: float | None = None
    thinking_share: float | None = None
    """Mean over requests of reasoning ÷ (reasoning + visible) tokens: how much of an answer was thinking."""
    thinking_share_ci: Interval | None = None
    """Student t over the requests' shares."""
    ttft_p50_ms: float | None = None
    """First generated token of any channel (thinking included)."""
    first_visible_p50_ms: float | None = None
    """Time to first output token: the first visible content, after the thinking."""
    first_visible_p50_ci_ms: Interval | None = None
    first_visible_p95_ms: float | None = None
    first_visible_p95_ci_ms: Interval | None = None
    thinking_p50_ms: float | None = None
    """Median of first_visible − TTFT: the time a reader waits while the model thinks."""
    thinking_p50_ci_ms: Interval | None = None
    tpot_visible_p50_ms: float | None = None
    tpot_visible_p95_ms: float | None = None
    visible_output_tokens_per_s: float | None = None
    """Visible tokens delivered per second of the measured window (reasoning tokens left out)."""


class Reasoning(Section):
    """Reasoning answers (docs/metrics.md, "Reasoning"): present when any record had reasoning tokens."""

    steps: list[ReasoningStep] = Field(default_factory=list)
    sources: dict[str, int] = Field(default_factory=dict)
    """Records per `reasoning_tokens_source`: `usage` (the server's count) or `channel` (chunks counted)."""
    per_1m_visible_tokens_usd: float | None = None
    """One node at its capacity under the SLO: its cost per million *visible* output tokens, the
    reasoning tokens paid for but not shown (`cost.per_1m_output_tokens_usd` counts them as output)."""
    cost_basis: str | None = None
    line: str = ""
    """The section in one sentence."""
