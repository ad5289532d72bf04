"""The LLM options on Locust's command line: one flag per field of `LLMOptions` (contracts/options.py),
named as the field (`--max-tokens` sets `max_tokens`, the scenario's `request.max_tokens`).

Old spellings stay as aliases: `--request-timeout` (now `--timeout-s`), `--header` (`--headers`),
and `--no-stream` / `--no-usage`, the off side of `--stream` / `--usage`.

How the sources combine, in one direction:

1. the process starts from its base options: the scenario's (`Scenario.options()`, parsed once)
   or, without one, `LLMOptions()`;
2. `add_arguments(parser, base)` registers the flags with the base's values as their defaults —
   what the web UI form and `--help` show;
3. `overridden(base, parsed)` takes from Locust's parsed options (the command line, its config
   file and `LOCUST_*` environment, the web UI form) each value that differs from the base's,
   parses it to its field's type, and returns the base with those fields replaced.

A scenario's values never come back through argparse: only what someone typed does. Headers add
up: `--headers K:V` adds to (or replaces one of) the scenario's `target.headers`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

from capacity_plugins.contracts.dialects import DIALECTS, TRITON_KEYS, TRITON_OUTPUTS, TRITON_PLACEMENTS
from capacity_plugins.contracts.options import SAMPLING_MODES, LLMOptions, flag
from capacity_plugins.contracts.redaction import REDACTED, is_secret_name
from capacity_plugins.errors import UserError


class _Flag(NamedTuple):
    help: str
    web_ui: bool = True  # shown in Locust's web UI form
    aliases: tuple[str, ...] = ()  # old spellings that still work
    choices: tuple[str, ...] | None = None


# One entry per field of LLMOptions (a test keeps them in step); the triton fields follow below.
FLAGS: dict[str, _Flag] = {
    "dialect": _Flag(f"API dialect: {', '.join(DIALECTS)}"),
    "model": _Flag("Model name sent in requests"),
    "corpus": _Flag("Prompt corpus: builtin, a file path, or synthetic:prompt_tokens=..,output_tokens=..,n=.."),
    "min_distinct": _Flag("Minimum distinct prompts the corpus must have"),
    "sampling": _Flag("Corpus sampling: seeded shuffle without replacement, sequential, random with replacement",
                      choices=SAMPLING_MODES),
    "seed": _Flag("Sampling seed"),
    "max_tokens": _Flag("max_tokens per request (a per-sample value in the corpus wins); 0 = no limit sent "
                        "(the server's default)"),
    "stream": _Flag("Streaming requests (--no-stream: no TTFT/ITL)"),
    "temperature": _Flag("Sampling temperature (server default when unset)"),
    "top_p": _Flag("top_p (server default when unset)"),
    "timeout_s": _Flag("Whole-request timeout in seconds", aliases=("--request-timeout",)),
    "ignore_eos": _Flag("Ask the server to generate exactly max_tokens (vLLM/SGLang)"),
    "usage": _Flag("Ask OpenAI servers for stream usage (include_usage); --no-usage for servers that reject it"),
    "tokenizer": _Flag("Hugging Face tokenizer.json used to count output tokens when the server reports no usage"),
    "retries": _Flag("Retry attempts for 429/5xx/connect failures (each attempt is recorded)"),
    "batch_size": _Flag("Items (texts, documents) per request of an embeddings or rerank dialect"),
    "images": _Flag("Synthetic images sent with each chat request (openai-chat, ollama); a corpus line's own "
                    "\"images\" win"),
    "image_size": _Flag("Resolution of the synthetic images, WIDTHxHEIGHT (e.g. 1024x1024)"),
    "api_key_env": _Flag("Name of the environment variable holding the API key (the key itself is never an option)"),
    "headers": _Flag("Extra request header K:V (repeatable)", web_ui=False, aliases=("--header",)),
    "insecure": _Flag("Do not verify TLS certificates"),
    "results_dir": _Flag("Exact output folder for requests.jsonl, meta.json, llm_stats.csv "
                         "(default: a new folder per run)"),
    "triton": _Flag("triton-generate: the model's own generate field names (--triton-<key>, below)", web_ui=False),
}
# The model's own generate field names (triton-generate only): set once per server, not per run.
TRITON_FLAGS: dict[str, _Flag] = {
    "input_field": _Flag("triton-generate: the model's input holding the prompt", web_ui=False),
    "max_tokens_field": _Flag("triton-generate: the key holding the output limit", web_ui=False),
    "output_field": _Flag("triton-generate: the model's output holding the generated text", web_ui=False),
    "params_in": _Flag("triton-generate: sampling settings as top-level keys or in `parameters`", web_ui=False,
                       choices=TRITON_PLACEMENTS),
    "outputs": _Flag("triton-generate: streamed outputs are deltas, the whole text so far (cumulative), "
                     "or auto-detected", web_ui=False, choices=TRITON_OUTPUTS),
}

_FIELDS = {f.name: f for f in dataclasses.fields(LLMOptions)}
# The argparse type of each field type (the fields' annotations are strings: `from __future__`).
_ARG_TYPES: dict[str, Any] = {"int": int, "float": float, "float | None": float}


class _OnOff(argparse.BooleanOptionalAction):
    """`--name` / `--no-name`, its help as written: Python 3.11's action appends a
    "(default: %(default)s)" that Locust's web UI form would show unformatted."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, help=help, **kwargs)
        self.help = help


def shown(options: LLMOptions) -> dict[str, Any]:
    """The options as the parser's defaults (dest → value): each field under its own name, a
    triton field under `triton_<key>`; headers are not shown (given ones add to the base's)."""
    out: dict[str, Any] = {name: getattr(options, name) for name in _FIELDS if name not in ("triton", "headers")}
    out["results_dir"] = None if options.results_dir is None else str(options.results_dir)
    out.update({f"triton_{key}": getattr(options.triton, key) for key in TRITON_KEYS})
    return out


def add_arguments(parser: Any, base: LLMOptions | None = None) -> None:
    """Register the options on a LocustArgumentParser (Locust builds a fresh parser each time),
    with `base`'s values as their defaults."""
    defaults = shown(base or LLMOptions())

    # Locust's own add_argument (not an argument group's) takes include_in_web_ui / is_secret.
    def add(name: str, dest: str, spec: _Flag, type_: str) -> None:
        kwargs: dict[str, Any] = {"dest": dest, "help": spec.help, "include_in_web_ui": spec.web_ui}
        if spec.choices is not None:
            kwargs["choices"] = list(spec.choices)
        if type_ == "bool":
            kwargs["action"] = _OnOff  # --stream / --no-stream
        elif name == "headers":
            kwargs["action"] = "append"
        elif type_ in _ARG_TYPES:
            kwargs["type"] = _ARG_TYPES[type_]
        kwargs["default"] = defaults.get(dest)
        parser.add_argument(flag(name), *spec.aliases, **kwargs)

    for name, spec in FLAGS.items():
        if name == "triton":
            for key, sub in TRITON_FLAGS.items():
                add(f"triton_{key}", f"triton_{key}", sub, "str")
        else:
            add(name, name, spec, str(_FIELDS[name].type))


def overridden(base: LLMOptions, parsed: Any) -> LLMOptions:
    """`base` with every option `parsed` gives a value of its own (one that differs from the
    default `add_arguments` showed), parsed to its field's type. UserError naming the flag."""
    if parsed is None:
        return base
    defaults = shown(base)
    changes: dict[str, Any] = {}
    triton: dict[str, str] = {}
    for dest, default in defaults.items():
        value = getattr(parsed, dest, default)
        if value == default and type(value) is type(default):
            continue
        if dest.startswith("triton_"):
            triton[dest.removeprefix("triton_")] = str(value)
        else:
            changes[dest] = _typed(dest, str(_FIELDS[dest].type), value)
    given = getattr(parsed, "headers", None)
    if given:
        changes["headers"] = {**base.headers, **parse_headers(given)}
    if triton:
        changes["triton"] = dataclasses.replace(base.triton, **triton)
    return dataclasses.replace(base, **changes) if changes else base


def _typed(name: str, type_: str, value: Any) -> Any:
    """A parsed value as its field's type. Locust's web form posts "" for an option whose default
    is None (it has no type to cast to): that means unset, not a value to send to the server."""
    text = "" if value is None else str(value).strip()
    if type_ == "bool":
        return value if isinstance(value, bool) else text.lower() in ("true", "1", "yes", "on")
    if type_ in ("str | None", "Path | None"):
        return (Path(text) if type_ == "Path | None" else text) if text else None
    if type_ == "str":
        return "" if value is None else str(value)
    if type_ == "float | None" and not text:
        return None
    try:
        return float(value) if type_.startswith("float") else int(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag(name)}: must be a number, got {value!r}") from None


def parse_headers(items: list[str] | str) -> dict[str, str]:
    if isinstance(items, str):  # the web UI form sends a comma-joined string
        items = [s for s in items.split(",") if s.strip()]
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UserError(f"--headers: expected K:V, got {redact_header_item(item)!r}")
        out[key.strip()] = value.strip()
    return out


def redact_header_item(item: str) -> str:
    key, sep, _ = item.partition(":")
    return f"{key}:{REDACTED}" if sep else REDACTED


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in headers.items()}


def redacted_options(parsed: Any, options: LLMOptions | None = None) -> dict[str, Any]:
    """Locust's parsed options with the plugin's as the run used them (`options`), safe to show or
    write: header values with key-like names and any option whose name looks secret are replaced
    (values are scrubbed again by value on write)."""
    raw = vars(parsed) if parsed is not None and not isinstance(parsed, dict) else dict(parsed or {})
    if options is not None:
        raw = {**raw, **shown(options), "headers": [f"{k}:{v}" for k, v in options.headers.items()]}
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "headers":
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
