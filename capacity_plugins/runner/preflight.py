"""Before any load: does the target answer, serve the model and complete one request?

A failed preflight is exit 1 with the reason in one line — a run against a wrong URL or model
would otherwise produce minutes of error records and a meaningless analysis. It lists the
models where the dialect says the server lists them (`Dialect.models_path` / `parse_models`, the
same listing meta.json's probe uses), picks the model when the scenario names none, and sends one
short non-streamed request with the run's own headers and TLS settings. A dialect with a
readiness route (`ready_path`: Triton's `/v2/health/ready`) has it checked first.
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from capacity_plugins.contracts.images import ImagePart
from capacity_plugins.contracts.redaction import Secrets, basic_auth, strip_userinfo, url_password
from capacity_plugins.dialects import Dialect, RequestParams, get_dialect
from capacity_plugins.errors import RunError, UserError
from capacity_plugins.scenario import Scenario

PREFLIGHT_TIMEOUT_S = 10.0
# The preflight's own request: tiny, so a slow model still answers within the request timeout.
PREFLIGHT_MAX_TOKENS = 4


@dataclass
class _Sample:
    """The one-request preflight prompt (SampleLike for the dialects)."""

    id: str = "preflight"
    max_tokens: int | None = PREFLIGHT_MAX_TOKENS
    images: tuple[ImagePart, ...] = ()  # text only: the test request asks whether the server answers at all

    @property
    def text(self) -> str:
        return "Say OK."

    def as_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.text}]


def target_headers(s: Scenario) -> dict[str, str]:
    """The headers every request to the target carries: the scenario's, Basic auth from URL
    userinfo, and the API key's Bearer token (which wins over userinfo when both are set)."""
    headers = dict(s.target.headers)
    basic = None if s.target.embedded else basic_auth(s.target.url)
    if basic is not None:
        headers["Authorization"] = basic
    if s.target.api_key_env:
        key = os.environ.get(s.target.api_key_env)
        if not key:
            raise UserError(f"target.api_key_env: environment variable {s.target.api_key_env} is not set or empty")
        headers["Authorization"] = f"Bearer {key}"
    return headers


class _Client:
    def __init__(self, insecure: bool, secrets: Secrets) -> None:
        # Unverified only when the scenario opts in with target.insecure (as the users do).
        self.tls = ssl._create_unverified_context() if insecure else None
        self.secrets = secrets

    def request(self, method: str, url: str, headers: dict[str, str], body: bytes | None = None,
                timeout: float = PREFLIGHT_TIMEOUT_S) -> tuple[int, bytes]:
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.tls) as r:  # http(s) only
                return r.status, r.read(1 << 20)
        except urllib.error.HTTPError as e:
            return e.code, e.read(4096)

    def text(self, body: bytes) -> str:
        """A server's answer, shortened and with every secret scrubbed (servers echo headers)."""
        return self.secrets.scrub(body[:200].decode(errors="replace"))


def _served_models(client: _Client, dialect: Dialect, url: str, headers: dict[str, str],
                   model: str | None) -> list[str] | None:
    """Model names the server lists (None when it has no listing, or a gateway answers 404)."""
    path = dialect.models_path
    if path is None:
        return None
    if "{model}" in path:  # an API that only answers for a named model (Triton's metadata)
        if not model:
            raise RunError(f"preflight: dialect {dialect.name} needs target.model (it is part of every URL)")
        path = path.replace("{model}", quote(model, safe=""))
    status, body = client.request("GET", url + path, headers)
    if status >= 400:
        if status == 404 and dialect.name.startswith("openai"):
            return None  # some OpenAI-compatible gateways do not list models
        raise RunError(f"preflight: GET {path} answered HTTP {status}: {client.text(body)}")
    models = dialect.parse_models(body)
    if models is None:
        raise RunError(f"preflight: GET {path} did not answer with a model listing")
    return models


def preflight(s: Scenario, url: str, secrets: Secrets | None = None) -> str:
    """Check the target answers, serves the model and completes one request; returns the model to use.

    Raises RunError (exit 1) naming what failed.
    """
    secrets = secrets if secrets is not None else Secrets()
    secrets.add(url_password(url), what="the target URL's password")
    client = _Client(s.target.insecure, secrets)
    base = strip_userinfo(url)
    headers = {"Accept-Encoding": "identity", **target_headers(s)}
    dialect = get_dialect(s.target.dialect, s.target.triton_fields())
    try:
        ready = getattr(dialect, "ready_path", None)  # a readiness route (Triton): asked first
        if ready is not None:
            status, body = client.request("GET", base + ready, headers)
            if status != 200:
                raise RunError(f"preflight: GET {ready} answered HTTP {status}, not ready: {client.text(body)}")
        models = _served_models(client, dialect, base, headers, s.target.model)
    except (urllib.error.URLError, OSError) as e:
        raise RunError(f"preflight: target {base} does not answer: {getattr(e, 'reason', e)}") from None
    model = s.target.model
    if model is None:
        if dialect.name != "tgi" and dialect.models_path is not None and not models:
            raise RunError(f"preflight: {base} lists no model; set target.model in the scenario")
        model = models[0] if models else ""
    elif models is not None and dialect.name != "tgi":
        names = set(models) | {m.removesuffix(":latest") for m in models}
        if model not in names:
            raise RunError(f"preflight: model {model!r} is not served by {base} (it serves: {', '.join(models[:10])})")
    if models is not None and dialect.name != "tgi":
        # a workload class's own model (a LoRA adapter): listed beside the base model, as vLLM does
        names = set(models) | {m.removesuffix(":latest") for m in models}
        for i, w in enumerate(s.workloads or ()):
            if w.model is not None and w.model not in names:
                raise RunError(f"preflight: workloads[{i}].model {w.model!r} is not served by {base} "
                               f"(it serves: {', '.join(models[:10])})")
    params = RequestParams(model=model, max_tokens=PREFLIGHT_MAX_TOKENS, stream=False, include_usage=False)
    call = dialect.build(_Sample(), params)
    try:
        status, body = client.request(call.method, base + call.path, {**headers, **call.headers}, call.body,
                                      timeout=min(s.request.timeout_s, 120.0))
    except (urllib.error.URLError, OSError) as e:
        raise RunError(f"preflight: test request to {call.path} failed: {getattr(e, 'reason', e)}") from None
    if status >= 400:
        raise RunError(f"preflight: test request to {call.path} answered HTTP {status}: {client.text(body)}")
    return model
