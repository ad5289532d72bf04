"""summary.json's `images`: latency by how many images a request carried.

A VLM prefills each image's tokens (contracts/images.py, the tile rule) before the first output
token, so TTFT and E2E grow with the images; a step's percentiles over a mix of 0- and 4-image
requests hide that. The records say each request's image count (contracts/records.py `images`);
this section splits each step's latency by it, written by analysis/images.py when any request had
an image.
"""

from __future__ import annotations

from pydantic import Field

from capacity_plugins.contracts.document import Section


class ImageGroup(Section):
    """One step's successful measured requests that carried `images` images."""

    images: int = 0
    requests: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    prompt_tokens_mean: float | None = None
    """The server's prompt count (text and image tokens) when it reports usage."""


class ImageStep(Section):
    step: int = 0
    level: float = 0.0
    groups: list[ImageGroup] = Field(default_factory=list)
    """By image count, fewest first."""


class ImageLatency(Section):
    """Image inputs (docs/metrics.md, "Images"): present when any request carried an image."""

    steps: list[ImageStep] = Field(default_factory=list)
    reference_level: float | None = None
    """The level the sentence is read at: the capacity's last passing level, else the lowest measured one."""
    ttft_p50_ms_per_image: float | None = None
    """At the reference level: the least-squares slope of TTFT p50 over the image count (ms per image)."""
    line: str = ""
    """The section in one sentence."""
