"""The LLM options of a run: one typed value (`LLMOptions`), one way in from each source.

Sources, and the one function that reads each:

- a scenario file → `LLMOptions.from_scenario(scenario)`;
- Locust's parsed options (command line, web UI form, the master's setup message to a worker)
  → `LLMOptions.from_parsed(namespace)`.

How they combine: when a locustfile runs with `--scenario FILE`, the plugin loads the scenario
while Locust builds its parser and installs the scenario's values as the parser's *defaults*
(`parser_defaults()`). argparse then does the merge by itself — a flag typed on the command line
wins, everything else is the scenario's — and the web UI form shows the scenario's values. There is
no "still at its default?" comparison anywhere.

Secrets are never options: `--api-key-env` names an environment variable; header values are
scrubbed by value wherever they are written (`contracts.redaction`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from capacity_plugins.contracts.dialects import (
    DIALECTS,
    TRITON_GENERATE,
    TRITON_KEYS,
    TRITON_OUTPUTS,
    TRITON_PLACEMENTS,
    TritonFields,
)
from capacity_plugins.contracts.redaction import REDACTED, Secrets, is_secret_name, run_secrets
from capacity_plugins.errors import UserError

if TYPE_CHECKING:
    from capacity_plugins.scenario import Scenario

SAMPLING_MODES = ("shuffle", "sequential", "random")


def add_arguments(parser: Any) -> None:
    """Register the options on a LocustArgumentParser (Locust builds a fresh parser each time)."""

    # Locust's own add_argument (not an argument group's) takes include_in_web_ui / is_secret.
    def add(*args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("include_in_web_ui", True)
        parser.add_argument(*args, **kwargs)

    add("--dialect", default="openai-chat", help=f"API dialect: {', '.join(DIALECTS)}")
    add("--model", default="", help="Model name sent in requests")
    add("--corpus", default="builtin", help="Prompt corpus: builtin, a file path, or synthetic:prompt_tokens=..,output_tokens=..,n=..")
    add("--max-tokens", type=int, default=128, help="max_tokens per request (a per-sample value in the corpus wins); 0 = server default")
    add("--no-stream", action="store_true", default=False, help="Non-streaming requests (no TTFT/ITL)")
    add("--temperature", type=float, default=None, help="Sampling temperature (server default when unset)")
    add("--top-p", type=float, default=None, help="top_p (server default when unset)")
    add("--request-timeout", type=float, default=600.0, help="Whole-request timeout in seconds")
    add("--sampling", default="shuffle", choices=list(SAMPLING_MODES), help="Corpus sampling: seeded shuffle without replacement, sequential, random with replacement")
    add("--seed", type=int, default=0, help="Sampling seed")
    add("--min-distinct", type=int, default=1000, help="Minimum distinct prompts the corpus must have")
    add("--api-key-env", default="", help="Name of the environment variable holding the API key (the key itself is never an option)")
    add("--header", action="append", default=[], include_in_web_ui=False, help="Extra request header K:V (repeatable)")
    add("--no-usage", action="store_true", default=False, help="Do not ask OpenAI servers for stream usage (include_usage)")
    add("--ignore-eos", action="store_true", default=False, help="Ask the server to generate exactly max_tokens (vLLM/SGLang)")
    add("--tokenizer", default=None, help="Hugging Face tokenizer.json used to count output tokens when the server reports no usage")
    add("--insecure", action="store_true", default=False, help="Do not verify TLS certificates")
    add("--results-dir", default=None, help="Exact output folder for requests.jsonl, meta.json, llm_stats.csv (default: a new folder per run)")
    add("--retries", type=int, default=0, help="Retry attempts for 429/5xx/connect failures (each attempt is recorded)")
    # The model's own generate field names (triton-generate only): set once per server, not per run.
    t = TritonFields()
    add("--triton-input-field", default=t.input_field, include_in_web_ui=False,
        help="triton-generate: the model's input holding the prompt")
    add("--triton-max-tokens-field", default=t.max_tokens_field, include_in_web_ui=False,
        help="triton-generate: the key holding the output limit")
    add("--triton-output-field", default=t.output_field, include_in_web_ui=False,
        help="triton-generate: the model's output holding the generated text")
    add("--triton-params-in", default=t.params_in, choices=list(TRITON_PLACEMENTS), include_in_web_ui=False,
        help="triton-generate: sampling settings as top-level keys or in `parameters`")
    add("--triton-outputs", default=t.outputs, choices=list(TRITON_OUTPUTS), include_in_web_ui=False,
        help="triton-generate: streamed outputs are deltas, the whole text so far (cumulative), or auto-detected")


def _opt_float(flag: str, value: Any) -> float | None:
    """An optional number. Locust's web form posts "" for an option whose default is None (it
    has no type to cast to); that means unset, not a value to send to the server."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: must be a number, got {value!r}") from None


def _opt_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None


@dataclass(frozen=True)
class LLMOptions:
    dialect: str = "openai-chat"
    model: str = ""
    corpus: str = "builtin"
    max_tokens: int | None = 128
    stream: bool = True
    temperature: float | None = None
    top_p: float | None = None
    request_timeout_s: float = 600.0
    sampling: str = "shuffle"
    seed: int = 0
    min_distinct: int = 1000
    api_key_env: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    include_usage: bool = True
    ignore_eos: bool = False
    tokenizer: str | None = None  # tokenizer.json path; counts output tokens when the server gives no usage
    insecure: bool = False
    results_dir: Path | None = None  # None: the results folder owner picks a new one
    retries: int = 0
    triton: TritonFields = field(default_factory=TritonFields)  # dialect triton-generate only

    @classmethod
    def from_parsed(cls, parsed: Any) -> LLMOptions:
        """From Locust's parsed_options (or any namespace; missing attributes take defaults)."""

        def get(name: str, default: Any) -> Any:
            value = getattr(parsed, name, default) if parsed is not None else default
            return default if value is None and default is not None else value

        max_tokens = get("max_tokens", 128)
        timeout = float(get("request_timeout", 600.0))
        if timeout <= 0:
            raise UserError(f"--request-timeout: must be > 0 seconds, got {timeout}")
        retries = int(get("retries", 0))
        if retries < 0:
            raise UserError(f"--retries: must be >= 0, got {retries}")
        if max_tokens is not None and int(max_tokens) < 0:
            raise UserError(f"--max-tokens: must be >= 0, got {max_tokens}")
        sampling = get("sampling", "shuffle")
        if sampling not in SAMPLING_MODES:
            raise UserError(f"--sampling: unknown mode {sampling!r} (known: {', '.join(SAMPLING_MODES)})")
        dialect = str(get("dialect", "openai-chat"))
        if dialect not in DIALECTS:
            raise UserError(f"--dialect: unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")
        results_dir = _opt_str(get("results_dir", None))
        model = str(get("model", ""))
        if dialect == TRITON_GENERATE and not model.strip():
            raise UserError(f"--model: dialect {TRITON_GENERATE} needs the model name (it is part of every URL)")
        return cls(
            dialect=dialect,
            model=model,
            corpus=str(get("corpus", "builtin")),
            max_tokens=int(max_tokens) or None if max_tokens is not None else None,
            stream=not bool(get("no_stream", False)),
            temperature=_opt_float("--temperature", get("temperature", None)),
            top_p=_opt_float("--top-p", get("top_p", None)),
            request_timeout_s=timeout,
            sampling=sampling,
            seed=int(get("seed", 0)),
            min_distinct=int(get("min_distinct", 1000)),
            api_key_env=str(get("api_key_env", "") or ""),
            headers=parse_headers(get("header", []) or []),
            include_usage=not bool(get("no_usage", False)),
            ignore_eos=bool(get("ignore_eos", False)),
            tokenizer=_opt_str(get("tokenizer", None)),  # the web form posts "" for unset
            insecure=bool(get("insecure", False)),
            results_dir=Path(results_dir) if results_dir else None,
            retries=retries,
            triton=_triton_fields(get),
        )

    @classmethod
    def from_scenario(cls, s: Scenario) -> LLMOptions:
        """The request settings a scenario file describes (its target, corpus and request sections)."""
        r = s.request
        return cls(
            dialect=s.target.dialect,
            model=s.target.model or "",
            corpus=s.corpus_path(),
            max_tokens=r.max_tokens,
            stream=r.stream,
            temperature=r.temperature,
            top_p=r.top_p,
            request_timeout_s=r.timeout_s,
            sampling=s.corpus.sampling,
            seed=s.corpus.seed,
            min_distinct=s.corpus.min_distinct,
            api_key_env=s.target.api_key_env or "",
            headers=dict(s.target.headers),
            include_usage=r.usage,
            ignore_eos=r.ignore_eos,
            tokenizer=s.tokenizer_path(),
            insecure=s.target.insecure,
            retries=r.retries,
            triton=s.target.triton_fields(),
        )

    def parser_defaults(self) -> dict[str, Any]:
        """These options in the parser's own terms (dest → value): the defaults a scenario installs,
        and the msgpack-safe form the master sends its workers (`from_parsed` reads it back)."""
        out: dict[str, Any] = {
            "dialect": self.dialect,
            "model": self.model,
            "corpus": self.corpus,
            "max_tokens": self.max_tokens or 0,
            "no_stream": not self.stream,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "request_timeout": self.request_timeout_s,
            "sampling": self.sampling,
            "seed": self.seed,
            "min_distinct": self.min_distinct,
            "api_key_env": self.api_key_env,
            "header": [f"{k}:{v}" for k, v in self.headers.items()],
            "no_usage": not self.include_usage,
            "ignore_eos": self.ignore_eos,
            "tokenizer": self.tokenizer,
            "insecure": self.insecure,
            "retries": self.retries,
            **{f"triton_{key}": getattr(self.triton, key) for key in TRITON_KEYS},
        }
        if self.results_dir is not None:
            out["results_dir"] = str(self.results_dir)
        return out

    def to_message(self) -> dict[str, Any]:
        return self.parser_defaults()

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> LLMOptions:
        return cls.from_parsed(SimpleNamespace(**data))

    def api_key(self) -> str | None:
        """The key from the named environment variable; UserError when it is named but unset."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise UserError(f"--api-key-env: environment variable {self.api_key_env} is not set or empty")
        return value

    def secrets(self, target_url: str | None = None) -> Secrets:
        """Every secret value these options carry (contracts.redaction.run_secrets)."""
        return run_secrets(self.api_key(), self.headers, target_url,
                           api_key_what=f"--api-key-env {self.api_key_env}")


def _triton_fields(get: Any) -> TritonFields:
    """The --triton-* options (their dests are triton_<TritonFields key>); a bad one names its flag."""
    defaults = TritonFields()
    fields = TritonFields(**{key: str(get(f"triton_{key}", getattr(defaults, key))) for key in TRITON_KEYS})
    found = fields.problem()
    if found is not None:
        raise UserError(f"--triton-{found[0].replace('_', '-')}: {found[1]}")
    return fields


def parse_headers(items: list[str] | str) -> dict[str, str]:
    if isinstance(items, str):  # the web UI form sends a comma-joined string
        items = [s for s in items.split(",") if s.strip()]
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UserError(f"--header: expected K:V, got {redact_header_item(item)!r}")
        out[key.strip()] = value.strip()
    return out


def redact_header_item(item: str) -> str:
    key, sep, _ = item.partition(":")
    return f"{key}:{REDACTED}" if sep else REDACTED


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in headers.items()}


def redacted_options(parsed: Any) -> dict[str, Any]:
    """vars(parsed_options) safe to show or write: header values with key-like names and any
    option whose name looks secret are replaced (values are scrubbed again by value on write)."""
    raw = vars(parsed) if parsed is not None and not isinstance(parsed, dict) else dict(parsed or {})
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "header":
            items = v if isinstance(v, list) else [v] if v else []
            out[k] = [_redact_item(str(i)) for i in items]
        elif is_secret_name(k) and k != "api_key_env" and v not in (None, "", False):
            out[k] = REDACTED
        elif isinstance(v, (str, int, float, bool, type(None))):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [x if isinstance(x, (str, int, float, bool, type(None))) else str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def _redact_item(item: str) -> str:
    key, sep, _ = item.partition(":")
    return f"{key}:{REDACTED}" if sep and is_secret_name(key) else item
