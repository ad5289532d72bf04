"""The images a request carries (contracts/images.py `ImagePart`): those a corpus names per prompt,
or synthetic ones made at a given size.

A corpus line names its images in `"images"`: a list of paths (relative to the corpus file's
folder), http(s) URLs (sent as they are: the server fetches them) or `data:` URIs. Each file is
checked when the corpus loads — it exists and Pillow can read its header, which gives its size —
so a bad one is one line naming the corpus file, its line and the image; its bytes are read and
base64-encoded when first sent, and the last `FILE_CACHE` encodings are kept.

Synthetic images (`request.images` per request of `request.image_size`) are JPEGs made with
Pillow: a gradient with seeded grain, so the size on the wire is a photo's rather than a flat
PNG's few bytes. They are deterministic (the same pixels for the same size and index on every
process and run) and made once per size and index, so the generator spends no CPU per request.
The n images of one request differ from each other; the same n are sent with every request, so a
server that caches images by content (vLLM's multimodal processor cache) may skip preprocessing
them after the first request — a corpus of distinct images measures that cost too.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import random
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.images import ImagePart, parse_size
from capacity_plugins.errors import UserError

FILE_CACHE = 64  # encoded corpus images kept in memory (a few MB each at most)
_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif", "BMP": "image/bmp"}


def _header(data: bytes | Path) -> tuple[int, int, str] | None:
    """(width, height, MIME type) from an encoded image's header; None when Pillow cannot read it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as im:
            return int(im.width), int(im.height), _MIME.get(str(im.format), f"image/{str(im.format).lower()}")
    except (UnidentifiedImageError, OSError, ValueError):
        return None


@functools.lru_cache(maxsize=FILE_CACHE)
def _file_base64(path: str) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def corpus_images(refs: Any, base: Path | None, label: str, where: str) -> tuple[ImagePart, ...]:
    """A corpus line's `"images"` as image parts; UserError `label:where: images[i] ...: why`."""
    if not isinstance(refs, list) or not all(isinstance(r, str) and r.strip() for r in refs):
        raise UserError(f"{label}:{where}: \"images\" must be a list of image paths or URLs")
    return tuple(_one(ref.strip(), base, f"{label}:{where}: images[{i}] {ref.strip()[:80]!r}")
                 for i, ref in enumerate(refs))


def _one(ref: str, base: Path | None, what: str) -> ImagePart:
    if ref.startswith(("http://", "https://")):
        return ImagePart(url=ref, ref=ref)  # the server fetches it; its size is the server's to know
    if ref.startswith("data:"):
        head, sep, payload = ref.partition(",")
        try:
            raw = base64.b64decode(payload, validate=True) if sep and head.endswith(";base64") else None
        except (binascii.Error, ValueError):
            raw = None
        found = _header(raw) if raw is not None else None
        if found is None:
            raise UserError(f"{what}: not a base64 data: URI of an image (data:image/png;base64,...)")
        w, h, mime = found
        return ImagePart(mime=mime, ref=ref, width=w, height=h, load=lambda: payload)
    path = Path(ref).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise UserError(f"{what}: no such image file ({path})")
    found = _header(path)
    if found is None:
        raise UserError(f"{what}: not an image Pillow can read ({path})")
    w, h, mime = found
    return ImagePart(mime=mime, ref=ref, width=w, height=h, load=functools.partial(_file_base64, str(path)))


# -- synthetic ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _synthetic_base64(width: int, height: int, index: int) -> str:
    from PIL import Image

    rng = random.Random(f"capacity-image:{width}x{height}:{index}")
    grain = Image.frombytes("L", (width, height), rng.randbytes(width * height))
    ramp = Image.linear_gradient("L").resize((width, height))
    tone = rng.randrange(256)
    red = Image.blend(ramp, grain, 0.25)
    green = Image.blend(ramp.transpose(Image.Transpose.ROTATE_90).resize((width, height)), grain, 0.15)
    blue = Image.blend(Image.new("L", (width, height), tone), grain, 0.35)
    buf = io.BytesIO()
    Image.merge("RGB", (red, green, blue)).save(buf, "JPEG", quality=85)
    return base64.b64encode(buf.getvalue()).decode("ascii")


@functools.lru_cache(maxsize=64)
def synthetic_images(count: int, size: str) -> tuple[ImagePart, ...]:
    """`count` distinct synthetic JPEGs of `size` (`WxH`) pixels (module doc); () for none. Made
    here, once per (count, size): call it when a run is set up, and each request finds them made."""
    if count <= 0:
        return ()
    found = parse_size(size)
    if found is None:
        raise UserError(f"image_size: must be WIDTHxHEIGHT in pixels, got {size!r}")
    width, height = found
    out = []
    for i in range(count):
        payload = _synthetic_base64(width, height, i)
        out.append(ImagePart(mime="image/jpeg", width=width, height=height, load=functools.partial(str, payload)))
    return tuple(out)
