"""The YAML scenario: one file describes one capacity rehearsal.

`load_scenario(path)` reads, expands `${VAR}` references, validates and returns a frozen
`Scenario`; every problem becomes one `UserError` line that names the file and the field path
(`quick.yaml: load.levels[2]: Input should be greater than 0`) or the YAML line. The `slo` and
`capacity` sections are the analysis's own models, embedded rather than redefined, so the
results folder's scenario copy is exactly what `capacity analyze` reads back.

No Locust import here: the runner, the analysis and the tests read scenarios without gevent.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from capacity_plugins.contracts.dialects import DIALECTS
from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig
from capacity_plugins.contracts.redaction import REDACTED, is_secret_name
from capacity_plugins.errors import UserError

EMBEDDED = "embedded"
# Corpus specs that name generated / packaged prompts instead of a file on disk.
BUILTIN_PREFIXES = ("builtin", "synthetic:")
# Env vars whose values are secrets: never written back out, even when a field used them.
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|AUTH|CRED|COOKIE|SESSION", re.IGNORECASE)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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


class TargetConfig(_Strict):
    url: str
    simulator: dict[str, Any] | None = None
    dialect: str = "openai-chat"
    # None: the embedded simulator's model, or the first model the server lists at preflight.
    model: str | None = None
    # Name of the environment variable holding the key; the key itself never appears in a file.
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    insecure: bool = False

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

    @property
    def embedded(self) -> bool:
        return self.url == EMBEDDED


class CorpusConfig(_Strict):
    # "builtin", "builtin:NAME" (e.g. builtin:long), "synthetic:..." or a file path (JSONL/CSV/ShareGPT/Parquet);
    # relative paths are resolved against the scenario file's folder.
    path: str = "builtin"
    min_distinct: int = Field(default=1000, ge=1)
    sampling: Literal["shuffle", "sequential", "random"] = "shuffle"
    seed: int = 42

    @property
    def is_file(self) -> bool:
        return not self.path.startswith(BUILTIN_PREFIXES)


class RequestConfig(_Strict):
    max_tokens: int = Field(default=128, ge=1)
    stream: bool = True
    temperature: float | None = Field(default=0.7, ge=0)
    top_p: float | None = Field(default=1.0, gt=0, le=1)
    timeout_s: float = Field(default=60.0, gt=0)
    # Ask the server to generate exactly max_tokens (vLLM/SGLang ignore_eos) so output length is controlled.
    ignore_eos: bool = False
    # Ask for server-side token usage (stream_options.include_usage); off for servers that reject it.
    usage: bool = True
    # A Hugging Face tokenizer.json counting output tokens when the server reports no usage
    # (relative paths are resolved against the scenario file's folder).
    tokenizer: str | None = None
    retries: int = Field(default=0, ge=0)


PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


class _LoadBase(_Strict):
    warmup_s: float = Field(default=10.0, ge=0)
    # Longest wait for in-flight requests between steps; None = request.timeout_s.
    drain_timeout_s: float | None = Field(default=None, ge=0)
    # client_limited thresholds (docs/capacity.md): sends behind schedule, or a generator process CPU-bound.
    max_schedule_lag_p99_ms: float = Field(default=100.0, gt=0)
    max_client_cpu_pct: float = Field(default=90.0, gt=0)


class ConcurrencySweepLoad(_LoadBase):
    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    levels: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8, 16], min_length=1)
    step_s: float = Field(default=60.0, gt=0)
    # Users started per second at each step; high so that the ramp fits inside warmup.
    spawn_rate: float = Field(default=100.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> ConcurrencySweepLoad:
        _check_warmup(self.warmup_s, self.step_s)
        return self


class _OpenLoop(_LoadBase):
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    # Gamma burstiness: coefficient of variation of the inter-arrival times (1 = Poisson).
    cv: float = Field(default=1.0, gt=0)
    max_concurrency: int = Field(default=256, ge=1)
    # Seed of the arrival schedule (the prompt order has its own seed in corpus.seed).
    seed: int = 0


class RateSweepLoad(_OpenLoop):
    kind: Literal["rate_sweep"] = "rate_sweep"
    levels: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0], min_length=1)
    step_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _warmup_inside_step(self) -> RateSweepLoad:
        _check_warmup(self.warmup_s, self.step_s)
        return self


class PeakLoad(_OpenLoop):
    kind: Literal["peak"] = "peak"
    # Open-loop rate to hold; None (and no users) = capacity.peak_qps × capacity.safety_factor.
    target_rps: float | None = Field(default=None, gt=0)
    # Closed-loop alternative: hold this many concurrent users.
    users: int | None = Field(default=None, ge=1)
    ramp_s: float = Field(default=30.0, ge=0)
    hold_s: float = Field(default=120.0, gt=0)
    warmup_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one_target(self) -> PeakLoad:
        if self.target_rps is not None and self.users is not None:
            raise ValueError("set either target_rps (open loop) or users (closed loop), not both")
        if self.warmup_s >= self.hold_s:
            raise ValueError(f"warmup_s ({self.warmup_s:g}) must be shorter than hold_s ({self.hold_s:g})")
        return self


LoadConfig = Annotated[ConcurrencySweepLoad | RateSweepLoad | PeakLoad, Field(discriminator="kind")]


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


class Scenario(_Strict):
    name: str = Field(default="rehearsal", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str | None = None
    target: TargetConfig
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    request: RequestConfig = Field(default_factory=RequestConfig)
    load: LoadConfig = Field(default_factory=ConcurrencySweepLoad)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    output: str = "results/"

    # Not part of the file: where it came from, and which env vars were expanded (for redaction).
    source_path: Path | None = Field(default=None, exclude=True)
    expanded_env: tuple[str, ...] = Field(default=(), exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _default_kind(cls, data: Any) -> Any:
        # The discriminated union needs `kind`; a load section without it is a concurrency sweep.
        if isinstance(data, dict) and isinstance(data.get("load"), dict) and "kind" not in data["load"]:
            data = {**data, "load": {**data["load"], "kind": "concurrency_sweep"}}
        return data

    @model_validator(mode="after")
    def _peak_has_target(self) -> Scenario:
        peak = self.load
        if isinstance(peak, PeakLoad) and peak.target_rps is None and peak.users is None and self.capacity.peak_qps is None:
            raise ValueError(
                "load: kind peak needs target_rps, users, or capacity.peak_qps (ramped to peak_qps × safety_factor)"
            )
        return self

    # -- derived values the load side and the runner use -------------------------------------------------
    @property
    def drain_timeout_s(self) -> float:
        d = self.load.drain_timeout_s
        return self.request.timeout_s if d is None else d

    @property
    def peak_rps(self) -> float | None:
        """The open-loop rate a peak rehearsal holds (None for a closed-loop peak or another kind)."""
        if not isinstance(self.load, PeakLoad) or self.load.users is not None:
            return None
        if self.load.target_rps is not None:
            return self.load.target_rps
        assert self.capacity.peak_qps is not None
        return self.capacity.peak_qps * self.capacity.safety_factor

    @property
    def open_loop(self) -> bool:
        return isinstance(self.load, RateSweepLoad) or self.peak_rps is not None

    def corpus_path(self) -> str:
        """The corpus spec with a file path made absolute (relative to the scenario file)."""
        if not self.corpus.is_file:
            return self.corpus.path
        return str(_resolve_corpus(self.corpus.path, self.source_path))

    def tokenizer_path(self) -> str | None:
        """request.tokenizer made absolute (relative to the scenario file); None when unset."""
        if not self.request.tokenizer:
            return None
        return str(_resolve_corpus(self.request.tokenizer, self.source_path))

    def api_key(self) -> str | None:
        return os.environ.get(self.target.api_key_env) if self.target.api_key_env else None

    def resolved_dict(self, redact: bool = True) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        load = data["load"]
        data["load"] = {"kind": load.pop("kind"), **load}  # the discriminator first, as users write it
        if not redact:
            return data
        secrets = [os.environ[n] for n in self.expanded_env if _SECRET_ENV.search(n) and os.environ.get(n)]
        key = self.api_key()
        if key:
            secrets.append(key)
        headers = data["target"]["headers"]
        for name in headers:
            if is_secret_name(name):
                headers[name] = REDACTED
        data["target"]["url"] = _redact_userinfo(data["target"]["url"])
        for item in data["telemetry"]["scrape"]:
            item["url"] = _redact_userinfo(item["url"])
        return _scrub(data, secrets)

    def resolved_yaml(self, redact: bool = True) -> str:
        """The scenario as run (defaults filled, env expanded), secrets redacted, for the results folder."""
        return yaml.safe_dump(self.resolved_dict(redact=redact), sort_keys=False)


# ---------------------------------------------------------------------------------------------------------


def _check_warmup(warmup_s: float, step_s: float) -> None:
    if warmup_s >= step_s:
        raise ValueError(f"warmup_s ({warmup_s:g}) must be shorter than step_s ({step_s:g})")


def _check_http_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{v!r} is not an http(s)://host[:port] URL")
    try:
        parts.port  # noqa: B018 -- raises on a non-numeric or out-of-range port
    except ValueError as e:
        raise ValueError(f"{v!r}: {e}") from None
    return v.rstrip("/")


def _redact_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{REDACTED}@{host}"))


def _scrub(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, secrets) for v in obj]
    if isinstance(obj, str):
        for s in secrets:
            obj = obj.replace(s, REDACTED)
    return obj


def _resolve_corpus(path: str, source: Path | None) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    base = source.parent if source is not None else Path.cwd()
    candidate = base / p
    # Relative to the scenario file first (the file travels with its data); the working directory second.
    if not candidate.exists() and (Path.cwd() / p).exists():
        return (Path.cwd() / p).resolve()
    return candidate.resolve()


def _expand_env(obj: Any, loc: str, used: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _expand_env(v, f"{loc}.{k}" if loc else str(k), used) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand_env(v, f"{loc}[{i}]", used) for i, v in enumerate(obj)]
    if not isinstance(obj, str) or "${" not in obj:
        return obj

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        value = os.environ.get(name)
        if value is None or value == "" and default is not None:
            if default is None:
                raise _FieldError(loc, f"environment variable {name} is not set (write ${{{name}:-default}} for a fallback)")
            return default
        used.add(name)
        return value

    return _ENV_REF.sub(sub, obj)


class _FieldError(Exception):
    def __init__(self, loc: str, msg: str) -> None:
        super().__init__(f"{loc}: {msg}")


def format_loc(loc: tuple[int | str, ...]) -> str:
    """pydantic's ('load', 'rate_sweep', 'levels', 2) → 'load.levels[2]' (union tags dropped)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # Discriminated-union tags and wrapper names are not keys the user wrote.
        if i > 0 and loc[i - 1] == "load" and part in ("concurrency_sweep", "rate_sweep", "peak"):
            continue
        if part.startswith(("function-", "list[", "dict[")) or part in ("str", "int", "float", "bool"):
            continue
        out += f".{part}" if out else part
    return out


def _first_error(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    loc = format_loc(tuple(err["loc"]))
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling; see scenarios/*.yaml for every key)"
        raw = err["loc"]
        if len(raw) > 2 and raw[0] == "load" and raw[1] in ("concurrency_sweep", "rate_sweep", "peak"):
            msg = f"unknown key for load kind {raw[1]}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif err["type"] == "union_tag_invalid":
        msg = "kind must be one of concurrency_sweep, rate_sweep, peak"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{loc}: {msg}{more}" if loc else f"{msg}{more}"


def parse_scenario(data: Any, where: str = "scenario", source: Path | None = None) -> Scenario:
    """Validate an already-parsed mapping; `where` prefixes every error (usually the file name)."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: the scenario must be a mapping of keys (name:, target:, load:, ...)")
    used: set[str] = set()
    try:
        data = _expand_env(data, "", used)
    except _FieldError as e:
        raise UserError(f"{where}: {e}") from None
    try:
        scenario = Scenario.model_validate({**data, "source_path": source, "expanded_env": tuple(sorted(used))})
    except ValidationError as e:
        raise UserError(f"{where}: {_first_error(e)}") from None
    if scenario.target.simulator is not None:
        _check_simulator(scenario.target.simulator, where)
    if scenario.corpus.is_file:
        path = _resolve_corpus(scenario.corpus.path, source)
        if not path.is_file():
            raise UserError(f"{where}: corpus.path: file not found: {path}")
    return scenario


def _check_simulator(settings: dict[str, Any], where: str) -> None:
    try:
        from capacity_plugins.simulator.config import SimConfig
    except ImportError:  # the simulator is another part; without it, settings are checked when it starts
        return
    try:
        SimConfig.from_mapping(settings, where="target.simulator")
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: cannot read scenario: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{p}{line}: YAML syntax error: {problem}") from None
    if data is None:
        raise UserError(f"{p}: the scenario file is empty (target.url is required)")
    return parse_scenario(data, where=str(p), source=p.resolve())
