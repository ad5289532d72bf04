"""Redaction: one marker, and secrets scrubbed by *value* wherever a string leaves the process.

A secret is any value the run knows to be one: the API key, a header value that came from the
environment or whose header name looks like a credential, the password of a URL's userinfo.
`Secrets.scrub()` replaces every occurrence of every such value, so a server that echoes the
Authorization header into an error body, or a gateway header copied into an option list, is
caught whatever field it lands in. Names alone (`is_secret_name`) only decide which header values
count as secrets; they never stand in for the value scrub.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

from capacity_plugins.errors import UserError

REDACTED: Final = "<redacted>"
# Shorter values would scrub ordinary words and numbers out of every file: refuse them as secrets.
MIN_SECRET_CHARS: Final = 6

# Header / option / variable names whose values are credentials. `max_tokens` must not match:
# only a trailing singular "token" (x-auth-token, access_token) counts.
_SECRET_NAME = re.compile(
    r"(authorization|api[-_]?key|secret|passw(or)?d|cookie|credential|bearer|session|(^|[-_])auth($|[-_])"
    r"|token$|key$)",
    re.I,
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def url_password(url: str) -> str | None:
    """The password of `http://user:PASS@host` (None when the URL has none)."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def basic_auth(url: str | None) -> str | None:
    """`http://user:PASS@host` → the `Authorization: Basic …` value for it (None without userinfo)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def strip_userinfo(url: str) -> str:
    """The URL without `user:password@` (credentials travel as a header instead)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


# The shortest piece of a secret worth hiding at a cut edge: fewer characters are a key's public
# prefix ("sk-") or ordinary text far more often than a leak.
CUT_EDGE_MIN_CHARS = 4


def _scrub_cut_edges(text: str, values: list[str]) -> str:
    """Texts are often cut (a server's answer kept to 300 characters, a log tail) before they are
    scrubbed: a secret that straddled the cut survives as a piece the whole-value replace cannot
    find. A text that ends with a secret's beginning, or starts with its end, loses that piece."""
    n = CUT_EDGE_MIN_CHARS
    if len(text) < n:
        return text
    tail, head = text[-n:], text[:n]
    for v in values:
        if tail in v:  # cheap test first: most texts share no 4 characters with a key
            for k in range(min(len(v) - 1, len(text)), n - 1, -1):
                if text.endswith(v[:k]):
                    text = text[:-k] + REDACTED
                    break
        if head in v:
            for k in range(min(len(v) - 1, len(text)), n - 1, -1):
                if text.startswith(v[-k:]):
                    text = REDACTED + text[k:]
                    break
    return text


class Secrets:
    """The secret values of one run, and the scrub every exit point applies."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        for v in values:
            self.add(v)

    def add(self, value: str | None, *, what: str = "a secret") -> None:
        if not value:
            return
        if len(value) < MIN_SECRET_CHARS:
            raise UserError(
                f"{what}: a secret shorter than {MIN_SECRET_CHARS} characters cannot be redacted safely "
                "(it would be scrubbed out of ordinary text everywhere); use a real key"
            )
        if value not in self._values:
            self._values.append(value)
            # Longest first: a key that contains another key is replaced whole.
            self._values.sort(key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def values(self) -> tuple[str, ...]:
        return tuple(self._values)

    def scrub(self, text: str) -> str:
        if not self._values or not text:
            return text
        for v in self._values:
            if v in text:
                text = text.replace(v, REDACTED)
        return _scrub_cut_edges(text, self._values)

    def scrub_bytes(self, data: bytes) -> bytes:
        if not self._values or not data:
            return data
        for v in self._values:
            b = v.encode()
            if b in data:
                data = data.replace(b, REDACTED.encode())
        return data

    def scrub_obj(self, obj: Any) -> Any:
        """Every string inside dicts / lists / tuples scrubbed (keys too); other values kept."""
        if not self._values:
            return obj
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.scrub_obj(v) for v in obj)
        return obj


def run_secrets(api_key: str | None, headers: Mapping[str, str], url: str | None = None, *,
                api_key_what: str = "the API key") -> Secrets:
    """Every secret value a run's settings carry: the API key, header values that are credentials
    (by name) or came from a secret-named environment variable (equal to its value), the password
    of the target URL. UserError when one is too short to redact safely."""
    found = Secrets()
    found.add(api_key, what=api_key_what)
    env_values = {v for k, v in os.environ.items() if v and is_secret_name(k)}
    for name, value in headers.items():
        if is_secret_name(name) or value in env_values:
            for part in _credential_parts(value):
                found.add(part, what=f"header {name}")
    if url:
        found.add(url_password(url), what="the target URL's password")
        if url_password(url):
            found.add((basic_auth(url) or "").removeprefix("Basic "), what="the target URL's credentials")
    return found


def _credential_parts(value: str) -> list[str]:
    """The value, and the credential after a scheme word ("Bearer sk-…" → also "sk-…")."""
    parts = [value]
    scheme, sep, rest = value.partition(" ")
    if sep and rest.strip() and scheme.isalpha():
        parts.append(rest.strip())
    return [p for p in parts if p]
