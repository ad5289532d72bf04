"""One Prometheus endpoint: fetch its exposition text and parse it into samples.

Never raises for a bad endpoint: a refused connection, an HTTP error, a timeout, a body that is
not exposition text all come back as `ScrapeResult.error` (a one-line reason), which the
collector records as a gap while the test goes on. urllib, not requests: requests/urllib3 must
not be imported before Locust's monkey patching (urllib3 / requests imported first break gevent's ssl patching).
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from prometheus_client.parser import text_string_to_metric_families

from capacity_plugins.telemetry.maps import KINDS, Sample

MAX_BODY_BYTES = 64 * 2**20
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass
class ScrapeResult:
    unix: float
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0


class ScrapeTarget:
    """A Prometheus endpoint to scrape; `kind` (one of maps.KINDS) is guessed on first scrape when None."""

    def __init__(self, url: str, kind: str | None = None) -> None:
        if kind is not None and kind not in KINDS:
            raise ValueError(f"telemetry target {url}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"telemetry target {url!r}: not an http(s) URL")
        if parts.path in ("", "/"):  # a bare host:port means the conventional /metrics path
            parts = parts._replace(path="/metrics")
        # Credentials in the URL become a Basic auth header; `url` (written to telemetry.csv, gaps and
        # logs) never carries them.
        self._headers = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}
        if parts.username is not None:
            userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
            parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
        self.url = parts.geturl()
        self.kind = kind
        self.default_host = parts.netloc
        # Proxies from the environment must not capture a loopback scrape.
        handlers = [urllib.request.ProxyHandler({})] if parts.hostname in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"ScrapeTarget({self.url!r}, kind={self.kind!r})"

    def scrape(self, timeout_s: float) -> ScrapeResult:
        t0 = time.monotonic()
        result = ScrapeResult(unix=time.time())
        try:
            text = self._fetch(timeout_s)
            result.samples = parse_exposition(text)
            if not result.samples:
                result.error = "no metrics in response"
        except urllib.error.HTTPError as e:
            result.error = f"HTTP {e.code} {e.reason}"
        except urllib.error.URLError as e:
            reason = e.reason
            result.error = "timeout" if isinstance(reason, TimeoutError) else f"unreachable: {reason}"
        except TimeoutError:
            result.error = "timeout"
        except OSError as e:
            result.error = f"connection error: {e}"
        except ValueError as e:
            result.error = f"malformed exposition text: {str(e)[:200]}"
        result.duration_s = time.monotonic() - t0
        return result

    def _fetch(self, timeout_s: float) -> str:
        req = urllib.request.Request(self.url, headers=self._headers)
        with self._opener.open(req, timeout=timeout_s) as resp:
            body = resp.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"response larger than {MAX_BODY_BYTES} bytes")
        return body.decode("utf-8", errors="replace")


def parse_exposition(text: str) -> list[Sample]:
    """Prometheus text format → samples; raises ValueError on garbage (HTML, JSON, truncated lines)."""
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return out
