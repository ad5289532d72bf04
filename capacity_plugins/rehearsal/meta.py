"""What meta.json says of the tools and the server: versions, and what the server says about itself.

The document itself is contracts/meta.py's `Meta` (plugin.py fills it, `Meta.write` writes it).
Secrets never reach it: options go through `redacted_options`, and probe requests carry the
auth header but their answers are reduced to model ids and version strings.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
import urllib.error
import urllib.request
from importlib import metadata
from typing import Any

log = logging.getLogger(__name__)

LIBRARIES = ("capacity-plugins", "locust", "gevent", "geventhttpclient", "orjson", "numpy", "pandas")
PROBE_PATHS = ("/v1/models", "/version", "/info", "/api/version", "/api/tags")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


def probe_server(base_url: str, headers: dict[str, str], timeout_s: float = 2.0) -> dict[str, Any]:
    """The model list and version the server exposes (best effort, short timeouts)."""
    found: dict[str, Any] = {}
    base = base_url.rstrip("/")
    for path in PROBE_PATHS:
        req = urllib.request.Request(base + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # the user's own target
                if resp.status != 200:
                    continue
                doc = json.loads(resp.read(1 << 20))
        except (urllib.error.URLError, OSError, ValueError):
            continue
        if path == "/v1/models" and isinstance(doc, dict):
            found["models"] = [m.get("id") for m in doc.get("data", []) if isinstance(m, dict)]
        elif path == "/api/tags" and isinstance(doc, dict):
            found.setdefault("models", [m.get("name") for m in doc.get("models", []) if isinstance(m, dict)])
        elif isinstance(doc, dict):
            keep = {k: doc[k] for k in ("version", "model_id", "model_dtype", "sha", "docker_label") if k in doc}
            if keep:
                found[path.strip("/").replace("/", "_")] = keep
    return found


def now_unix() -> float:
    return time.time()
