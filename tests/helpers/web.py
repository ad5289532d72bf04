"""Tiny urllib helpers for polling web UIs and exporters on loopback."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers); an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def http_post(url: str, data: dict[str, Any] | None = None, timeout: float = 10) -> tuple[int, bytes]:
    """POST a form; (status, body)."""
    body = urllib.parse.urlencode(data or {}).encode()
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str, timeout: float = 5) -> Any:
    status, body, _ = http_get(url, timeout)
    assert status == 200, (url, status, body[:500])
    return json.loads(body)


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return 200 <= resp.status < 300
