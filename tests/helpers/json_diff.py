"""What a JSON document loses on a round trip (a dashboard through Grafana's model)."""

from __future__ import annotations

from typing import Any


def not_kept(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths in `a` that `b` lacks or holds differently (b may add defaults)."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return [path]
        return [p for k, v in a.items() for p in ([f"{path}.{k}"] if k not in b else not_kept(v, b[k], f"{path}.{k}"))]
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return [path]
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in not_kept(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
