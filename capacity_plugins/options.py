"""The plugin's command-line options (issue 3) and their validation into `LLMOptions`.

Options are registered on Locust's parser so they also show in the web UI form. Secrets are
never options: `--api-key-env` names an environment variable, and header values that look like
credentials are redacted wherever options are shown or written (`redacted_options`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from capacity_plugins.contracts.dialects import DIALECTS
from capacity_plugins.contracts.redaction import REDACTED, is_secret_name
from capacity_plugins.errors import UserError

SAMPLING_MODES = ("shuffle", "sequential", "random")


def add_arguments(parser: Any) -> None:
    """Register on a LocustArgumentParser (idempotent enough: Locust builds a fresh parser each time)."""
    # Locust's own add_argument (not an argument group) takes include_in_web_ui / is_secret.
    def add(*args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("include_in_web_ui", True)
        parser.add_argument(*args, **kwargs)

    g = SimpleNamespace(add_argument=add)
    g.add_argument("--dialect", default="openai-chat", choices=list(DIALECTS), help="API dialect")
    g.add_argument("--model", default="", help="Model name sent in requests")
    g.add_argument("--corpus", default="builtin", help="Prompt corpus: builtin, a file path, or synthetic:prompt_tokens=..,output_tokens=..,n=..")
    g.add_argument("--max-tokens", type=int, default=128, help="max_tokens per request (a per-sample value in the corpus wins); 0 = server default")
    g.add_argument("--no-stream", action="store_true", default=False, help="Non-streaming requests (no TTFT/ITL)")
    g.add_argument("--temperature", type=float, default=None, help="Sampling temperature (server default when unset)")
    g.add_argument("--top-p", type=float, default=None, help="top_p (server default when unset)")
    g.add_argument("--request-timeout", type=float, default=600.0, help="Whole-request timeout in seconds")
    g.add_argument("--sampling", default="shuffle", choices=list(SAMPLING_MODES), help="Corpus sampling: seeded shuffle without replacement, sequential, random with replacement")
    g.add_argument("--seed", type=int, default=0, help="Sampling seed")
    g.add_argument("--min-distinct", type=int, default=1000, help="Minimum distinct prompts the corpus must have")
    g.add_argument("--api-key-env", default="", help="Name of the environment variable holding the API key (the key itself is never an option)")
    g.add_argument("--header", action="append", default=[], include_in_web_ui=False, help="Extra request header K:V (repeatable)")
    g.add_argument("--no-usage", action="store_true", default=False, help="Do not ask OpenAI servers for stream usage (include_usage)")
    g.add_argument("--ignore-eos", action="store_true", default=False, help="Ask the server to generate exactly max_tokens (vLLM/SGLang)")
    g.add_argument("--tokenizer", default=None, help="Hugging Face tokenizer.json used to count output tokens when the server reports no usage")
    g.add_argument("--insecure", action="store_true", default=False, help="Do not verify TLS certificates")
    g.add_argument("--results-dir", default="results", help="Exact output folder for requests.jsonl, meta.json, llm_stats.csv")
    g.add_argument("--retries", type=int, default=0, help="Retry attempts for 429/5xx/connect failures (each attempt is recorded)")


def _opt_float(flag: str, value: Any) -> float | None:
    """An optional number. Locust's web form posts "" for an option whose default is None (it
    has no type to cast to); that means unset, not a value to send to the server."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: must be a number, got {value!r}") from None


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
    results_dir: Path = Path("results")
    retries: int = 0

    @classmethod
    def from_parsed(cls, parsed: Any) -> LLMOptions:  # noqa: C901 - one flat list of options
        """From Locust's parsed_options (or any namespace; missing attributes take defaults)."""

        def get(name: str, default: Any) -> Any:
            value = getattr(parsed, name, default) if parsed is not None else default
            return default if value is None and default is not None else value

        headers = parse_headers(get("header", []) or [])
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
        return cls(
            dialect=str(get("dialect", "openai-chat")),
            model=str(get("model", "")),
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
            headers=headers,
            include_usage=not bool(get("no_usage", False)),
            ignore_eos=bool(get("ignore_eos", False)),
            tokenizer=str(get("tokenizer", None) or "").strip() or None,  # the web form posts "" for unset
            insecure=bool(get("insecure", False)),
            results_dir=Path(str(get("results_dir", "results"))),
            retries=retries,
        )

    def api_key(self) -> str | None:
        """The key from the named environment variable; UserError when it is named but unset."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise UserError(f"--api-key-env: environment variable {self.api_key_env} is not set or empty")
        return value


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
    option whose name looks secret are replaced."""
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
