"""Image inputs: what the corpus, the dialects, the simulator and the analysis share of an image.

- `ImagePart`: one image a chat request carries — a `data:` URI's parts (its MIME type and base64
  payload) or a URL — and its size when known. The corpus makes them (corpus/images.py: files a
  corpus names, synthetic images), the dialects put them in the request (OpenAI `image_url`,
  Ollama `images`), the records keep their count and sizes.
- The tile rule (`TileRule`, `image_tokens`): how many prompt tokens an image of W × H pixels
  costs on a tiling VLM server. The simulator charges prefill by it (simulator/images.py),
  `capacity corpus stats` estimates a corpus's image tokens by it, with the same defaults.
- `parse_size`: a resolution as written in a scenario, `WxH`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True)
class TileRule:
    """Dynamic tiling as InternVL, LLaVA-NeXT / OneVision and (in effect) Qwen2-VL count it: an image
    of W × H pixels is `ceil(W / tile_px) × ceil(H / tile_px)` tiles, at most `max_tiles`; one of more
    than one tile also gets a downscaled thumbnail tile; each tile is `tokens_per_tile` prompt tokens.

    With the defaults: 224 × 224 → 1 tile → 256 tokens; 448 × 448 → 1 → 256; 896 × 448 → 2 + 1 → 768;
    1024 × 1024 → 9 + 1 → 2560; 4000 × 3000 → 12 (capped) + 1 → 3328.
    """

    tile_px: int = 448
    tokens_per_tile: int = 256
    max_tiles: int = 12  # the thumbnail comes on top

    def tiles(self, width: int, height: int) -> int:
        n = min(self.max_tiles, math.ceil(width / self.tile_px) * math.ceil(height / self.tile_px))
        return n + 1 if n > 1 else n

    def tokens(self, width: int, height: int) -> int:
        return self.tiles(width, height) * self.tokens_per_tile


DEFAULT_TILES: Final = TileRule()


def image_tokens(width: int, height: int, rule: TileRule = DEFAULT_TILES) -> int:
    """Prompt tokens of a W × H image by the tile rule (the simulator's defaults unless given)."""
    return rule.tokens(width, height)


_SIZE = re.compile(r"^\s*([1-9][0-9]{0,4})\s*[xX×]\s*([1-9][0-9]{0,4})\s*$")
MAX_SIDE: Final = 8192  # a larger synthetic image is a mistake (and megabytes per request)


def parse_size(text: str) -> tuple[int, int] | None:
    """`"1024x768"` → (1024, 768); None when it is not `WxH` with sides of 1 to MAX_SIDE pixels."""
    m = _SIZE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    w, h = int(m.group(1)), int(m.group(2))
    return (w, h) if w <= MAX_SIDE and h <= MAX_SIDE else None


@dataclass(frozen=True, eq=False)
class ImagePart:
    """One image of a request. Exactly one of `url` (sent as it is) or an encoded image (`mime`
    and its base64 payload) is set; the payload may be read only when first sent (`load`), so a
    corpus of many images is not held in memory at once."""

    mime: str | None = None
    url: str | None = None
    ref: str | None = None  # what the corpus named (a path as written, a URL); None: synthetic
    width: int | None = None  # None: not known to the client (a URL it does not fetch)
    height: int | None = None
    # The encoded file in base64, made (and cached) by whoever made the part: a request must not
    # encode megabytes again each time it is sent.
    load: Callable[[], str] | None = field(default=None, repr=False)

    def base64(self) -> str:
        """The encoded image in base64 (Ollama's `images`, a data: URI's payload)."""
        assert self.load is not None, "a URL image has no payload"
        return self.load()

    def uri(self) -> str:
        """What an OpenAI `image_url.url` carries: the URL, or a `data:` URI of the image."""
        return self.url if self.url is not None else f"data:{self.mime};base64,{self.base64()}"

    @property
    def size(self) -> str | None:
        """`WxH` as the records keep it; None when the client does not know it."""
        return None if self.width is None or self.height is None else f"{self.width}x{self.height}"
