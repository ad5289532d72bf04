"""Latency by image count: the summary section `images` (contracts/image_latency.py).

The section applies when any record carried an image (`images` > 0; a text-only request's field
is null, counted here as 0 images). Each measured step's successful requests are grouped by their
image count, each group with its TTFT and E2E percentiles (nearest rank, the product's one
definition) and the server's mean prompt count. The sentence is read at one level — the
capacity's last passing level, else the lowest measured one — with the TTFT p50 each image adds
there (a least-squares slope over the groups): what a VLM's users wait for per image they attach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.analysis.step_records import gathered
from capacity_plugins.contracts.image_latency import ImageGroup, ImageLatency, ImageStep
from capacity_plugins.contracts.percentiles import nearest_rank

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.contracts.summary import Capacity, StepSummary


@section("images")
class ImagesSection(AnalysisSection):
    """Any run whose requests carried images."""

    def applies(self, run: RunData) -> bool:
        return run.records.has("images")  # null on a text-only request

    def step_records(self, run: RunData) -> ImageRecords:
        return ImageRecords()

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> ImageLatency:
        found = image_latency(run, rows)
        read_at(found, None)
        return found

    def capacity(self, found: ImageLatency, cap: Capacity, run: RunData) -> Capacity:
        read_at(found, cap.last_pass_level)  # the capacity is known now: read the sentence there
        return cap


class ImageRecords:
    """A step consumer (step_records.py): each step's latency by image count, from its measured
    successful records, on the analysis's walk."""

    def __init__(self) -> None:
        self.groups: dict[int, list[ImageGroup]] = {}

    def __call__(self, index: int, records: pd.DataFrame) -> None:
        mine = records[(records["step"] >= 0) & ~records["warmup"] & records["ok"]]
        if index >= 0 and len(mine):
            self.groups[index] = _groups(mine)


def image_latency(run: RunData, rows: list[StepSummary]) -> ImageLatency:
    got = gathered(run, "images", ImageRecords)
    return ImageLatency(steps=[ImageStep(step=row.step, level=row.level, groups=got.groups[row.step])
                               for row in rows if row.step in got.groups])


def _groups(mine: pd.DataFrame) -> list[ImageGroup]:
    counts = mine["images"].fillna(0).astype(int)
    out = []
    for n, group in mine.groupby(counts):
        ttft = _finite(group["ttft_ms"])
        e2e = _finite(group["e2e_ms"])
        prompt = _finite(group["prompt_tokens"])
        out.append(ImageGroup(
            images=int(n), requests=len(group),
            ttft_p50_ms=_pct(ttft, 0.50), ttft_p95_ms=_pct(ttft, 0.95),
            e2e_p50_ms=_pct(e2e, 0.50), e2e_p95_ms=_pct(e2e, 0.95),
            prompt_tokens_mean=float(prompt.mean()) if prompt.size else None))
    return out


def _finite(col: pd.Series) -> np.ndarray:
    v = col.to_numpy(float)
    return np.sort(v[~np.isnan(v)])


def _pct(sorted_values: np.ndarray, q: float) -> float | None:
    return float(nearest_rank(sorted_values.tolist(), q)) if sorted_values.size else None


def read_at(found: ImageLatency, level: float | None) -> None:
    """The sentence at `level` (None or no such step: the lowest measured level)."""
    if not found.steps:
        found.line = "requests carried images, but no measured step had a successful one"
        return
    ref = next((s for s in found.steps if level is not None and s.level == level), None)
    ref = ref or min(found.steps, key=lambda s: s.level)
    found.reference_level = ref.level
    points = [(g.images, g.ttft_p50_ms) for g in ref.groups if g.ttft_p50_ms is not None]
    found.ttft_p50_ms_per_image = _slope(points)
    parts = [f"{g.images} image{'' if g.images == 1 else 's'} {_ms(g.ttft_p50_ms)}" for g in ref.groups]
    if points:
        words = f"TTFT p50 by images per request at level {ref.level:.3g}: " + ", ".join(parts)
        if found.ttft_p50_ms_per_image is not None:
            words += f" — each image adds about {found.ttft_p50_ms_per_image:.3g} ms"
    else:
        words = f"at level {ref.level:.3g} no request streamed a first token (no TTFT)"
    e2e = [g for g in ref.groups if g.e2e_p95_ms is not None]
    if e2e:
        words += "; E2E p95 " + ", ".join(f"{g.images}: {_ms(g.e2e_p95_ms)}" for g in e2e)
    found.line = words


def _slope(points: list[tuple[int, float]]) -> float | None:
    xs = np.array([p[0] for p in points], float)
    ys = np.array([p[1] for p in points], float)
    if len(set(xs.tolist())) < 2:
        return None
    return float(np.polyfit(xs, ys, 1)[0])


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f} ms"
