"""The whole scenario: its sections, the values derived from them, and its copy in a results folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, field_validator, model_validator

from capacity_plugins import kinds
from capacity_plugins.contracts.options import LLMOptions, images_problem
from capacity_plugins.contracts.planning import CapacityConfig, SLOConfig, VerdictConfig
from capacity_plugins.contracts.redaction import (
    REDACTED,
    Secrets,
    is_secret_name,
    strip_userinfo,
    url_password,
)
from capacity_plugins.errors import UserError
from capacity_plugins.scenario.items import items_problem
from capacity_plugins.scenario.loads import LoadConfig
from capacity_plugins.scenario.sections import (
    EMBEDDED,
    CorpusConfig,
    RequestConfig,
    TargetConfig,
    TelemetryConfig,
    _Strict,
)
from capacity_plugins.scenario.workloads import WorkloadClass, WorkloadConfig, problems, resolve

# The key of a run label (the run catalog's `run_labels.key`, a `--label KEY=VALUE`).
LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$")


def parse_labels(pairs: list[str] | None, flag: str = "--label") -> dict[str, str]:
    """`KEY=VALUE` flags as a dict; UserError naming the bad one."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not LABEL_KEY.match(key):
            raise UserError(f"{flag} {pair!r}: expected KEY=VALUE, KEY letters, digits, _ . - (at most 63)")
        out[key] = value
    return out


def _label_value(x: Any) -> Any:
    """A scalar label as text (`true`, `42`); anything else is left for the type check to refuse."""
    if isinstance(x, bool):
        return str(x).lower()
    return str(x) if isinstance(x, int | float) else x


class Scenario(_Strict):
    name: str = Field(default="rehearsal", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str | None = None
    target: TargetConfig
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    request: RequestConfig = Field(default_factory=RequestConfig)
    load: LoadConfig = Field(default_factory=kinds.default_load)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    # The thresholds of the analysis's decisions (verdict, intervals, plan refusal, compare).
    verdict: VerdictConfig = Field(default_factory=VerdictConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    # Request classes drawn by weight, each with its own corpus / request / SLO overrides
    # (scenario/workloads.py); None = one class, the top-level sections.
    workloads: list[WorkloadConfig] | None = Field(default=None, min_length=1)
    output: str = "results/"
    # Run the whole load this many times (capacity run --repeat overrides): the analysis reports
    # the run-to-run spread, and `capacity compare` judges differences against it.
    repeat: int = Field(default=1, ge=1)
    # What the run catalog groups runs by (build id, git sha, config; docs/history.md): written into
    # meta.json, `capacity run --label KEY=VALUE` over these. A number or a boolean is kept as its text.
    labels: dict[str, str] = Field(default_factory=dict)

    # Not part of the file: where it came from, and which env vars were expanded (for redaction).
    source_path: Path | None = Field(default=None, exclude=True)
    expanded_env: tuple[str, ...] = Field(default=(), exclude=True)

    @field_validator("labels", mode="before")
    @classmethod
    def _label_text(cls, v: Any) -> Any:
        if isinstance(v, dict):
            bad = [k for k in v if not LABEL_KEY.match(str(k))]
            if bad:
                raise ValueError(f"label {bad[0]!r}: letters, digits, _ . - (at most 63), starting with a letter or _")
            return {str(k): _label_value(x) for k, x in v.items()}
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_kind(cls, data: Any) -> Any:
        # The discriminated union needs `kind`; a load section without it is the default kind.
        if isinstance(data, dict) and isinstance(data.get("load"), dict) and "kind" not in data["load"]:
            data = {**data, "load": {**data["load"], "kind": kinds.DEFAULT}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _kind_sets_the_simulator(cls, data: Any) -> Any:
        # A kind may need settings of the embedded simulator (a cache probe: its prefix-cache model);
        # set here so the results folder's copy says so. A setting the file gives stays.
        if not isinstance(data, dict) or not isinstance(data.get("load"), dict) or not isinstance(data.get("target"), dict):
            return data
        kind = kinds.find(data["load"].get("kind"))
        target = data["target"]
        sim = target.get("simulator")
        if kind is None or target.get("url") != EMBEDDED or not (sim is None or isinstance(sim, dict)):
            return data
        missing = {k: v for k, v in kind.simulator_settings.items() if k not in (sim or {})}
        if not missing:
            return data
        return {**data, "target": {**target, "simulator": {**(sim or {}), **missing}}}

    @model_validator(mode="after")
    def _workloads_valid(self) -> Scenario:
        if self.workloads:
            found = problems(self.workloads, self.request, self.slo)
            if found is not None:
                raise ValueError(found)
        return self

    @model_validator(mode="after")
    def _items_requests(self) -> Scenario:
        # embeddings / rerank: not streamed, judged on E2E (scenario/items.py)
        found = items_problem(self.target.dialect, self.request, self.slo)
        if found is not None:
            raise ValueError(found)
        return self

    @model_validator(mode="after")
    def _images_sendable(self) -> Scenario:
        # images need a chat dialect that can carry them (contracts/dialects.py IMAGE_DIALECTS)
        requests = [("request", self.request)] + [
            (f"workloads[{i}].request", w.request) for i, w in enumerate(self.workloads or ())
            if "images" in w.request.model_fields_set]
        for where, r in requests:
            found = images_problem(self.target.dialect, r.images, r.image_size)
            if found is not None:
                raise ValueError(f"{where}.{found[0]}: {found[1]}")
        return self

    @model_validator(mode="after")
    def _load_fits(self) -> Scenario:
        # What the load kind needs of the other sections (a peak's rate, a search's sample size).
        self.load.check(self)
        return self

    # -- derived values the load side and the runner use -------------------------------------------------
    def options(self) -> LLMOptions:
        """The request settings this scenario describes (its target, corpus and request sections),
        as the typed options a run uses: each field the key of the same name (contracts/options.py)."""
        t, c, r = self.target, self.corpus, self.request
        return LLMOptions(
            dialect=t.dialect,
            model=t.model or "",
            corpus=self.corpus_path(),
            min_distinct=c.min_distinct,
            sampling=c.sampling,
            seed=c.seed,
            max_tokens=r.max_tokens,
            stream=r.stream,
            temperature=r.temperature,
            top_p=r.top_p,
            timeout_s=r.timeout_s,
            ignore_eos=r.ignore_eos,
            usage=r.usage,
            tokenizer=self.tokenizer_path(),
            retries=r.retries,
            batch_size=r.batch_size,
            images=r.images,
            image_size=r.image_size,
            api_key_env=t.api_key_env or "",
            headers=dict(t.headers),
            insecure=t.insecure,
            triton=t.triton_fields(),
        )

    @property
    def drain_timeout_s(self) -> float:
        d = self.load.drain_timeout_s
        return self.request.timeout_s if d is None else d

    @property
    def peak_rps(self) -> float | None:
        """The open-loop rate a peak rehearsal holds (None for a closed-loop peak or another kind)."""
        return self.load.held_rps(self)

    @property
    def open_loop(self) -> bool:
        return self.load.open_loop(self)

    def trace_path(self) -> Path | None:
        """load.path of a trace replay, made absolute (relative to the scenario file); None otherwise."""
        return self.load.replay_file(self)

    def resolve_path(self, path: str) -> Path:
        """A file the scenario names, made absolute (relative to the scenario file)."""
        return _resolve_corpus(path, self.source_path)

    def corpus_path(self) -> str:
        """The corpus spec with a file path made absolute (relative to the scenario file)."""
        if not self.corpus.is_file:
            return self.corpus.path
        return str(_resolve_corpus(self.corpus.path, self.source_path))

    @property
    def workload_classes(self) -> tuple[WorkloadClass, ...]:
        """The classes with their sections merged over the top-level ones (empty: no classes)."""
        return tuple(resolve(w, self.corpus, self.request, self.slo) for w in self.workloads or ())

    def class_corpus_path(self, w: WorkloadConfig) -> str | None:
        """The corpus spec a class sets itself (a file made absolute), or None: the top-level one."""
        if "path" not in w.corpus.model_fields_set:
            return None
        if not w.corpus.is_file:
            return w.corpus.path
        return str(_resolve_corpus(w.corpus.path, self.source_path))

    def tokenizer_path(self) -> str | None:
        """request.tokenizer made absolute (relative to the scenario file); None when unset."""
        if not self.request.tokenizer:
            return None
        return str(_resolve_corpus(self.request.tokenizer, self.source_path))

    def api_key(self) -> str | None:
        return os.environ.get(self.target.api_key_env) if self.target.api_key_env else None

    def secrets(self) -> Secrets:
        """The secret values this scenario carries: the API key, every `${VAR}` it expanded whose
        name looks like a credential, header values with credential names, URL passwords."""
        found = Secrets()
        found.add(self.api_key(), what=f"target.api_key_env {self.target.api_key_env}")
        for name in self.expanded_env:
            if is_secret_name(name) or any(w in name.upper() for w in ("PASSW", "CRED", "AUTH")):
                found.add(os.environ.get(name), what=f"${{{name}}}")
        for name, value in self.target.headers.items():
            if is_secret_name(name):
                scheme, _, rest = value.partition(" ")
                found.add(rest.strip() if scheme.isalpha() and rest.strip() else value, what=f"target.headers.{name}")
        for url in [self.target.url, *(t.url for t in self.telemetry.scrape)]:
            found.add(url_password(url), what="a URL's password")
        return found

    def resolved_dict(self, redact: bool = True) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        load = data["load"]
        data["load"] = {"kind": load.pop("kind"), **load}  # the discriminator first, as users write it
        if data.get("workloads") is None:
            data.pop("workloads", None)  # a scenario without classes keeps the copy it always had
        if not redact:
            return data
        headers = data["target"]["headers"]
        for name in headers:
            if is_secret_name(name):
                headers[name] = REDACTED
        data["target"]["url"] = _without_password(data["target"]["url"])
        for item in data["telemetry"]["scrape"]:
            item["url"] = _without_password(item["url"])
        scrubbed: dict[str, Any] = self.secrets().scrub_obj(data)
        return scrubbed

    def resolved_yaml(self, redact: bool = True) -> str:
        """The scenario as run (defaults filled, env expanded), secrets redacted, for the results folder."""
        return yaml.safe_dump(self.resolved_dict(redact=redact), sort_keys=False)


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


def _without_password(url: str) -> str:
    """`http://user:PASS@host` → `http://user:<redacted>@host` (the user name stays readable)."""
    if url_password(url) is None:
        return url
    scheme, _, rest = url.partition("://")
    user = rest.split("@", 1)[0].split(":", 1)[0]
    return f"{scheme}://{user}:{REDACTED}@{strip_userinfo(url).partition('://')[2]}"
