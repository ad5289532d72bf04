"""Image inputs on the simulated VLM: how many prompt tokens an image costs, by its resolution.

The rule (contracts/images.py `TileRule`, which `capacity corpus stats` estimates with too) is the dynamic tiling common VLM servers use (InternVL, LLaVA-NeXT / LLaVA-OneVision,
Qwen2-VL's 28-px patches grouped per tile in effect): an image of W × H pixels is cut into
`ceil(W / image_tile_px) × ceil(H / image_tile_px)` tiles, capped at `image_max_tiles`; an image of
more than one tile also gets a downscaled thumbnail tile; each tile is `image_tokens_per_tile`
prompt tokens. With the defaults (448-px tiles, 256 tokens, at most 12):

    224 × 224 → 1 tile → 256 tokens;  448 × 448 → 1 → 256;  896 × 448 → 2 + 1 → 768;
    1024 × 1024 → 9 + 1 → 2560;  4000 × 3000 → 12 (capped) + 1 → 3328.

The tokens join the request's prompt: they are prefilled at `prefill_tokens_per_s` like text (so
TTFT grows with the images), count toward `max_model_len` and the KV budget, and are in the
answer's `usage.prompt_tokens` (as vLLM counts them). The simulator reads the size from the image
itself — a `data:` URI (OpenAI `image_url`) or Ollama's base64 `images` — by its header; an image
given as an http(s) URL is not fetched (the simulator reaches no network) and costs one tile.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from capacity_plugins.contracts.images import TileRule
from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.protocol import BadRequest

IMAGE_UNIT = "<image>"  # one prompt token of an image (never hashed with text: its own unit)


def rule(config: SimConfig) -> TileRule:
    return TileRule(config.image_tile_px, config.image_tokens_per_tile, config.image_max_tiles)


def tiles(width: int, height: int, config: SimConfig) -> int:
    """Tiles of a W × H image, the thumbnail included (module doc)."""
    return rule(config).tiles(width, height)


def image_tokens(width: int, height: int, config: SimConfig) -> int:
    return rule(config).tokens(width, height)


def image_size(data: bytes, where: str) -> tuple[int, int]:
    """(width, height) from an encoded image's header; BadRequest when it is none Pillow can read."""
    from PIL import Image, UnidentifiedImageError  # Pillow: only a request with an image needs it

    try:
        with Image.open(io.BytesIO(data)) as im:
            return int(im.width), int(im.height)
    except (UnidentifiedImageError, OSError, ValueError):
        raise BadRequest(f"{where}: not an image the server can read") from None


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: invalid base64 image data") from None


def url_tokens(url: Any, config: SimConfig, where: str) -> int:
    """An OpenAI `image_url.url`: a data: URI is measured, an http(s) URL costs one tile."""
    if not isinstance(url, str) or not url:
        raise BadRequest(f"{where}: image_url.url must be a non-empty string")
    if url.startswith("data:"):
        head, sep, payload = url.partition(",")
        if not sep or not head.endswith(";base64"):
            raise BadRequest(f"{where}: a data: URI image must be base64 (data:image/png;base64,...)")
        return image_tokens(*image_size(_b64(payload, where), where), config)
    if url.startswith(("http://", "https://")):
        return config.image_tokens_per_tile
    raise BadRequest(f"{where}: image_url.url must be a data: URI or an http(s) URL")


def openai_image_units(content: Any, config: SimConfig, i: int) -> list[str]:
    """The image tokens of one OpenAI message's content parts (`{"type": "image_url", ...}`)."""
    if not isinstance(content, list):
        return []
    n = 0
    for j, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "image_url":
            where = f"messages[{i}].content[{j}]"
            ref = part.get("image_url")
            n += url_tokens(ref.get("url") if isinstance(ref, dict) else ref, config, where)
    return [IMAGE_UNIT] * n


def ollama_image_units(images: Any, config: SimConfig, i: int) -> list[str]:
    """The image tokens of one Ollama message's `images` (base64 strings, no data: prefix)."""
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(x, str) for x in images):
        raise BadRequest(f"messages[{i}].images: must be a list of base64 strings")
    n = sum(image_tokens(*image_size(_b64(x, f"messages[{i}].images[{j}]"), f"messages[{i}].images[{j}]"), config)
            for j, x in enumerate(images))
    return [IMAGE_UNIT] * n
