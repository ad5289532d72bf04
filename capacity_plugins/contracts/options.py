"""The LLM options of a run: one typed value (`LLMOptions`), one name and one default per option.

Every option has one name: the field here, its scenario key (`SCENARIO_KEYS`: the field's name in
the `target`, `corpus` or `request` section) and its flag (`flag(name)`: `--max-tokens` for
`max_tokens`). The only spelling that differs is the corpus: `corpus.path` in a scenario, because
`corpus` names the section. A value's default is written once, here:

- `LLMOptions()` is a plain Locust run's options (`locust -f … --max-tokens 64`);
- `REHEARSAL` is a scenario's: the same, except that a capacity rehearsal samples like a chat
  product (temperature 0.7, top_p 1.0), gives up on a request after 60 s and draws its prompts
  with seed 42. The scenario's sections take their defaults from it (scenario/sections.py).

How the sources combine (client/options.py, plugin.py): a process parses its scenario into
options once (`Scenario.options()`), or starts from `LLMOptions()` without one; the options given
on the command line, in Locust's config file or environment, or in the web UI form replace single
fields of that object as typed values. The master sends the result to its workers as it is
(`to_message` / `from_message`, swarm/messages.py `Setup`).

`max_tokens: 0` (`--max-tokens 0`) means "send no limit": the server decides the output length.
It is the same value in a scenario, on the command line and here; the dialects leave the limit
out of the request (dialects/base.py `effective_max_tokens`).

Secrets are never options: `api_key_env` names an environment variable; header values are
scrubbed by value wherever they are written (`contracts.redaction`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from capacity_plugins.contracts.dialects import DIALECTS, IMAGE_DIALECTS, TRITON_GENERATE, TritonFields
from capacity_plugins.contracts.images import MAX_SIDE, parse_size
from capacity_plugins.contracts.redaction import Secrets, run_secrets
from capacity_plugins.errors import UserError

SAMPLING_MODES: Final[tuple[str, ...]] = ("shuffle", "sequential", "random")


def flag(name: str) -> str:
    """The command-line flag of an option (`max_tokens` → `--max-tokens`)."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class LLMOptions:
    dialect: str = "openai-chat"
    model: str = ""  # "" = none named (a scenario's preflight asks the server for one)
    corpus: str = "builtin"
    min_distinct: int = 1000
    sampling: str = "shuffle"
    seed: int = 0
    max_tokens: int = 128  # 0 = no limit sent (the server's default); a sample's own max_tokens wins
    stream: bool = True
    temperature: float | None = None  # None = not sent (the server's default)
    top_p: float | None = None
    timeout_s: float = 600.0
    ignore_eos: bool = False
    usage: bool = True  # ask OpenAI servers for usage in the stream (stream_options.include_usage)
    tokenizer: str | None = None  # tokenizer.json path; counts output tokens when the server gives no usage
    retries: int = 0
    batch_size: int = 1  # items per request of an embeddings / rerank dialect (contracts.dialects.ITEM_DIALECTS)
    images: int = 0  # synthetic images per request (a prompt naming its own images sends those)
    image_size: str = "1024x1024"  # the synthetic images' resolution, WxH
    api_key_env: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    insecure: bool = False
    results_dir: Path | None = None  # None: the results folder owner picks a new one
    triton: TritonFields = field(default_factory=TritonFields)  # dialect triton-generate only

    def __post_init__(self) -> None:
        # Whichever source the values came from, the options a run uses are valid; a bad one
        # names its flag (a scenario's are checked first, by the scenario model, naming its key).
        if self.dialect not in DIALECTS:
            raise UserError(f"--dialect: unknown dialect {self.dialect!r} (known: {', '.join(DIALECTS)})")
        if self.dialect == TRITON_GENERATE and not self.model.strip():
            raise UserError(f"--model: dialect {TRITON_GENERATE} needs the model name (it is part of every URL)")
        if self.sampling not in SAMPLING_MODES:
            raise UserError(f"--sampling: unknown mode {self.sampling!r} (known: {', '.join(SAMPLING_MODES)})")
        if self.batch_size < 1:
            raise UserError(f"--batch-size: must be at least 1, got {self.batch_size}")
        found_images = images_problem(self.dialect, self.images, self.image_size)
        if found_images is not None:
            raise UserError(f"{flag(found_images[0])}: {found_images[1]}")
        for name in ("max_tokens", "retries"):
            if getattr(self, name) < 0:
                raise UserError(f"{flag(name)}: must be >= 0, got {getattr(self, name)}")
        if not self.timeout_s > 0:
            raise UserError(f"--timeout-s: must be > 0 seconds, got {self.timeout_s}")
        found = self.triton.problem()
        if found is not None:
            raise UserError(f"{flag('triton_' + found[0])}: {found[1]}")

    # -- between the master and its workers (msgpack-safe) ------------------------------------------

    def to_message(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)  # the triton fields become a dict of their own
        out["results_dir"] = None if self.results_dir is None else str(self.results_dir)
        return out

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> LLMOptions:
        results_dir = data.get("results_dir")
        return cls(**{**data, "headers": dict(data.get("headers") or {}),
                      "results_dir": Path(results_dir) if results_dir else None,
                      "triton": TritonFields(**(data.get("triton") or {}))})

    # -- secrets --------------------------------------------------------------------------------------

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


def images_problem(dialect: str, images: int, image_size: str) -> tuple[str, str] | None:
    """(option, why) for the first rule synthetic images break: a count ≥ 0, a `WxH` size, a
    dialect that can send them. The scenario names the key, the flags the flag."""
    if images < 0:
        return "images", f"must be >= 0, got {images}"
    if parse_size(image_size) is None:
        return "image_size", f"must be WIDTHxHEIGHT in pixels (1 to {MAX_SIDE} each), like 1024x768; got {image_size!r}"
    if images and dialect not in IMAGE_DIALECTS:
        return "images", (f"the {dialect} dialect cannot send images; use one of {', '.join(IMAGE_DIALECTS)} "
                          "(or images: 0)")
    return None


# A scenario's defaults: a capacity rehearsal's sampling settings, request timeout and prompt seed.
REHEARSAL: Final[LLMOptions] = dataclasses.replace(LLMOptions(), temperature=0.7, top_p=1.0, timeout_s=60.0, seed=42)

# Where each option lives in a scenario file; None: a flag only (the results folder a scenario's
# run writes to is `capacity run`'s decision, from `output`).
SCENARIO_KEYS: Final[dict[str, str | None]] = {
    "dialect": "target.dialect",
    "model": "target.model",
    "corpus": "corpus.path",
    "min_distinct": "corpus.min_distinct",
    "sampling": "corpus.sampling",
    "seed": "corpus.seed",
    "max_tokens": "request.max_tokens",
    "stream": "request.stream",
    "temperature": "request.temperature",
    "top_p": "request.top_p",
    "timeout_s": "request.timeout_s",
    "ignore_eos": "request.ignore_eos",
    "usage": "request.usage",
    "tokenizer": "request.tokenizer",
    "retries": "request.retries",
    "batch_size": "request.batch_size",
    "images": "request.images",
    "image_size": "request.image_size",
    "api_key_env": "target.api_key_env",
    "headers": "target.headers",
    "insecure": "target.insecure",
    "results_dir": None,
    "triton": "target.triton",
}
