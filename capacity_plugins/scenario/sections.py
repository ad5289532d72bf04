"""The scenario's sections about *what* is loaded: target, corpus, request, telemetry.

Every model rejects unknown keys (a typo in a capacity plan must fail loudly) and is frozen.
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from capacity_plugins.contracts.dialects import DIALECTS, TRITON_GENERATE, TritonFields, url_path_problem
from capacity_plugins.contracts.images import MAX_SIDE, parse_size
from capacity_plugins.contracts.options import REHEARSAL

EMBEDDED = "embedded"
# Corpus specs that name generated / packaged prompts instead of a file on disk.
BUILTIN_PREFIXES = ("builtin", "synthetic:")


class _Strict(BaseModel):
    # A typo in a capacity plan must fail loudly, not be ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScrapeTarget(_Strict):
    url: str
    # Which exporter speaks at the URL (dcgm, vllm, tgi, sglang, triton, ...); None = guess from names.
    kind: str | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return _check_http_url(v)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str | None) -> str | None:
        try:
            from capacity_plugins.telemetry.maps import KINDS
        except ImportError:  # pragma: no cover - telemetry is another part
            return v
        if v is not None and v not in KINDS:
            raise ValueError(f"unknown kind {v!r} (known: {', '.join(KINDS)})")
        return v


_TRITON_DEFAULTS = TritonFields()


class TritonConfig(_Strict):
    """`target.triton`: how the model names its generate fields (the rules: contracts.dialects)."""

    input_field: str = _TRITON_DEFAULTS.input_field
    max_tokens_field: str = _TRITON_DEFAULTS.max_tokens_field
    output_field: str = _TRITON_DEFAULTS.output_field
    params_in: str = _TRITON_DEFAULTS.params_in  # top | parameters
    outputs: str = _TRITON_DEFAULTS.outputs  # auto | delta | cumulative

    @model_validator(mode="after")
    def _usable(self) -> TritonConfig:
        found = self.fields().problem()
        if found is not None:
            raise ValueError(f"{found[0]}: {found[1]}")
        return self

    def fields(self) -> TritonFields:
        return TritonFields(**self.model_dump())


class TargetConfig(_Strict):
    url: str
    simulator: dict[str, Any] | None = None
    dialect: str = REHEARSAL.dialect
    # The model's generate field names, for dialect triton-generate only (None: the defaults).
    triton: TritonConfig | None = None
    # None: the embedded simulator's model, or the first model the server lists at preflight.
    model: str | None = None
    # Name of the environment variable holding the key; the key itself never appears in a file.
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    insecure: bool = REHEARSAL.insecure

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v == EMBEDDED:
            return v
        return _check_http_url(v)

    @field_validator("dialect")
    @classmethod
    def _known_dialect(cls, v: str) -> str:
        if v not in DIALECTS:
            raise ValueError(f"unknown dialect {v!r} (known: {', '.join(DIALECTS)})")
        return v

    @field_validator("model", "api_key_env", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: Any) -> Any:
        # `model: ${MODEL:-}` with MODEL unset means "ask the server", not a model named "".
        return None if v == "" else v

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("must be the NAME of an environment variable (the key itself never goes in the file)")
        return v

    @model_validator(mode="after")
    def _simulator_only_embedded(self) -> TargetConfig:
        if self.simulator is not None and self.url != EMBEDDED:
            raise ValueError("simulator settings are only used with url: embedded")
        return self

    @model_validator(mode="after")
    def _url_is_the_servers_root(self) -> TargetConfig:
        # The dialect appends its own path (/v1/chat/completions): a URL ending in it would be
        # loaded at /v1/v1/chat/completions, after a preflight that finds no model there.
        found = None if self.embedded else url_path_problem(self.url, self.dialect)
        if found is not None:
            raise ValueError(f"url: {found}")
        return self

    @model_validator(mode="after")
    def _triton_needs_its_model(self) -> TargetConfig:
        if self.triton is not None and self.dialect != TRITON_GENERATE:
            raise ValueError(f"triton: settings for dialect {TRITON_GENERATE} only (dialect is {self.dialect})")
        if self.dialect == TRITON_GENERATE and self.model is None:
            # No listing to pick one from: Triton serves every step of an ensemble as a model too.
            raise ValueError(f"model: dialect {TRITON_GENERATE} needs the model name (it is part of every URL)")
        return self

    @property
    def embedded(self) -> bool:
        return self.url == EMBEDDED

    def triton_fields(self) -> TritonFields:
        return self.triton.fields() if self.triton is not None else TritonFields()


class CorpusConfig(_Strict):
    # "builtin", "builtin:NAME" (e.g. builtin:long), "synthetic:..." or a file path (JSONL/CSV/ShareGPT/Parquet);
    # relative paths are resolved against the scenario file's folder.
    path: str = REHEARSAL.corpus
    min_distinct: int = Field(default=REHEARSAL.min_distinct, ge=1)
    sampling: Literal["shuffle", "sequential", "random"] = REHEARSAL.sampling  # type: ignore[assignment]  # SAMPLING_MODES
    seed: int = REHEARSAL.seed

    @property
    def is_file(self) -> bool:
        return not self.path.startswith(BUILTIN_PREFIXES)


class RequestConfig(_Strict):
    # Every default is the rehearsal's (contracts/options.py REHEARSAL), the one place it is written.
    # 0 = no limit sent (the server's default), as `--max-tokens 0`.
    max_tokens: int = Field(default=REHEARSAL.max_tokens, ge=0)
    stream: bool = REHEARSAL.stream
    temperature: float | None = Field(default=REHEARSAL.temperature, ge=0)
    top_p: float | None = Field(default=REHEARSAL.top_p, gt=0, le=1)
    timeout_s: float = Field(default=REHEARSAL.timeout_s, gt=0)
    # Ask the server to generate exactly max_tokens (vLLM/SGLang ignore_eos) so output length is controlled.
    ignore_eos: bool = REHEARSAL.ignore_eos
    # Ask for server-side token usage (stream_options.include_usage); off for servers that reject it.
    usage: bool = REHEARSAL.usage
    # A Hugging Face tokenizer.json counting output tokens when the server reports no usage
    # (relative paths are resolved against the scenario file's folder).
    tokenizer: str | None = REHEARSAL.tokenizer
    retries: int = Field(default=REHEARSAL.retries, ge=0)
    # Items (texts, documents) per request of an embeddings / rerank dialect; 1 for generation.
    batch_size: int = Field(default=REHEARSAL.batch_size, ge=1)
    # Synthetic images per chat request (openai-chat, ollama), made at image_size (WxH) once per
    # size, not per request (corpus/images.py); a corpus line that names its own images sends those.
    images: int = Field(default=REHEARSAL.images, ge=0)
    image_size: str = REHEARSAL.image_size

    @field_validator("image_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if parse_size(v) is None:
            raise ValueError(f"must be WIDTHxHEIGHT in pixels (1 to {MAX_SIDE} each), like 1024x768; got {v!r}")
        return v


class TelemetryConfig(_Strict):
    scrape: list[ScrapeTarget] = Field(default_factory=list)
    # Sample local GPUs through NVML when present (absent GPU = no rows, not an error).
    nvml: bool = True
    interval_s: float = Field(default=1.0, gt=0)

    @field_validator("scrape", mode="before")
    @classmethod
    def _plain_urls(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"url": item} if isinstance(item, str) else item for item in v]
        return v


def _check_http_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{v!r} is not an http(s)://host[:port] URL")
    try:
        parts.port  # noqa: B018 -- raises on a non-numeric or out-of-range port
    except ValueError as e:
        raise ValueError(f"{v!r}: {e}") from None
    return v.rstrip("/")
