"""Every engine and fault knob of the simulator, with defaults for a small, realistic GPU server.

One object, three spellings: this dataclass (tests, the launcher), the command line
(`capacity simulate --max-num-seqs 8`, built from the fields so the two never drift) and a
scenario's `target.simulator` mapping (`SimConfig.from_mapping`). Bad values raise `UserError`
with the field path in the message, so a typo is one clear line, never a traceback.

The defaults model an 8-slot server: decode step 8 ms + 1 ms per running sequence, prefill
20 000 tokens/s. A 1→32 user sweep with max_tokens≈64 then shows throughput growing to 8 users
(≈111 → 500 tokens/s) and flat after, with queue time growing — a clear knee within seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, fields
from typing import Any

from capacity_plugins.contracts.images import DEFAULT_TILES
from capacity_plugins.errors import UserError, did_you_mean


@dataclass(frozen=True)
class SimConfig:
    # -- engine ------------------------------------------------------------------------------
    model: str = "sim-model"
    max_model_len: int = 4096  # prompt + max_tokens above this gets vLLM's 400
    max_num_seqs: int = 8  # running slots (continuous batch size)
    kv_cache_tokens: int = 65536  # KV budget: prompt + generated tokens of running requests
    prefill_tokens_per_s: float = 20000.0
    decode_base_ms: float = 8.0  # decode step = base + per_seq × running
    decode_per_seq_ms: float = 1.0
    prefix_cache: bool = False  # repeated 16-token prompt blocks skip prefill
    block_size: int = 16  # prefix-cache block, in tokens (vLLM's default)
    default_max_tokens: int = 256  # when a request sets no limit (vLLM would use the context)
    force_max_tokens: bool = False  # every request runs to its max, as if ignore_eos were set
    tokens_per_write: int = 1  # tokens coalesced into one stream write (a chunk of k tokens)
    reasoning_tokens: int = 0  # the first N output tokens are reasoning deltas
    # 0: every request reasons exactly reasoning_tokens; above it, each request draws its count
    # uniformly from reasoning_tokens..reasoning_tokens_max (a reasoning model's spread)
    reasoning_tokens_max: int = 0
    reasoning_field: str = "reasoning_content"  # OpenAI form's delta key: vLLM / SGLang's, or "reasoning"
    # OpenAI usage says completion_tokens_details.reasoning_tokens (OpenAI's API does; vLLM does not)
    reasoning_usage: bool = False
    service_jitter_cv: float = 0.0  # per-request lognormal factor (mean 1) on prefill and decode time
    batch_delay_ms: float = 0.0  # hold waiting requests this long for enough to fill the free slots
    no_usage: bool = False  # OpenAI streams never carry usage, even when asked (llama.cpp-like)
    seed: int = 0
    # -- LoRA adapters (simulator/lora.py): vLLM's --lora-modules, --max-loras ------------------
    lora_adapters: int = 0  # adapters served beside the base model, named lora-1 … lora-N (0: none)
    max_loras: int = 1  # adapters a batch may hold at once (GPU adapter slots, LRU)
    lora_swap_ms: float = 0.0  # loading an adapter into a slot stalls the step this long
    # -- image inputs (simulator/images.py): a W × H image is tiles × tokens per tile of prompt ---
    image_tile_px: int = DEFAULT_TILES.tile_px
    image_tokens_per_tile: int = DEFAULT_TILES.tokens_per_tile
    image_max_tiles: int = DEFAULT_TILES.max_tiles  # the thumbnail tile comes on top
    # -- Triton generate extension (/v2/models/{model}/generate[_stream]) ----------------------
    triton_input_field: str = "text_input"  # the prompt's key (an input tensor of the model)
    triton_max_tokens_field: str = "max_tokens"  # output limit: an input tensor or a request parameter
    triton_output_field: str = "text_output"  # the generated text's key in each response
    triton_cumulative: bool = False  # streamed outputs carry the whole text so far, not the delta
    # -- faults ------------------------------------------------------------------------------
    error_rate: float = 0.0  # fraction of requests answered 500/503 at once
    queue_limit_429: int = 0  # 429 when this many already wait (0 = off)
    disconnect_prob: float = 0.0  # close the connection mid-stream
    stall_s: float = 0.0  # ... hold a stream's writes this long,
    stall_prob: float = 0.0  # ... with this probability per request
    malformed_prob: float = 0.0  # one chunk of the stream is not valid JSON
    stream_error_prob: float = 0.0  # an error event inside a 200 stream, then the end
    # -- simulated GPU -----------------------------------------------------------------------
    gpu_memory_mib: int = 24576

    # ---------------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, d: Any, where: str = "target.simulator") -> SimConfig:
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise UserError(f"{where}: must be a mapping of simulator settings")
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in d.items():
            if key not in known:
                hint = did_you_mean(key, known) or f" (known: {', '.join(known)})"
                raise UserError(f"{where}.{key}: unknown simulator setting{hint}")
            values[key] = _coerce(value, known[key].type, f"{where}.{key}")
        try:
            return cls(**values)
        except _FieldError as e:
            raise UserError(f"{where}.{e.field}: {e.why}") from None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise UserError (`field: why`) for the first field out of range."""

        def bad(field: str, why: str) -> UserError:
            return _FieldError(field, why)

        for field in ("max_model_len", "max_num_seqs", "kv_cache_tokens", "block_size",
                      "default_max_tokens", "tokens_per_write", "gpu_memory_mib", "max_loras",
                      "image_tile_px", "image_tokens_per_tile", "image_max_tiles"):
            if getattr(self, field) < 1:
                raise bad(field, "must be a positive integer")
        for field in ("reasoning_tokens", "reasoning_tokens_max", "queue_limit_429", "seed", "lora_adapters"):
            if getattr(self, field) < 0:
                raise bad(field, "must be a non-negative integer")
        if self.prefill_tokens_per_s <= 0:
            raise bad("prefill_tokens_per_s", "must be a positive number")
        for field in ("decode_base_ms", "decode_per_seq_ms", "stall_s", "service_jitter_cv", "batch_delay_ms",
                      "lora_swap_ms"):
            if not getattr(self, field) >= 0 or getattr(self, field) == float("inf"):
                raise bad(field, "must be a finite non-negative number")
        for field in ("error_rate", "disconnect_prob", "stall_prob", "malformed_prob", "stream_error_prob"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                raise bad(field, "must be a probability between 0 and 1")
        if self.kv_cache_tokens < self.max_model_len:
            raise bad("kv_cache_tokens", f"must be at least max_model_len ({self.max_model_len}), "
                      "or a full-length request could never run")
        if self.reasoning_tokens_max and self.reasoning_tokens_max < self.reasoning_tokens:
            raise bad("reasoning_tokens_max", f"must be 0 (fixed) or at least reasoning_tokens ({self.reasoning_tokens})")
        if self.reasoning_field not in REASONING_FIELDS:
            raise bad("reasoning_field", f"must be one of {', '.join(REASONING_FIELDS)} (got {self.reasoning_field!r})")
        if not self.model.strip():
            raise bad("model", "must be a non-empty string")
        names: dict[str, str] = {}
        for field in ("triton_input_field", "triton_max_tokens_field", "triton_output_field"):
            name = getattr(self, field)
            if not _FIELD_NAME.fullmatch(name):
                raise bad(field, f"must be a JSON key of letters, digits and _ (got {name!r})")
            if name in _TRITON_RESERVED:
                raise bad(field, f"{name!r} is a key Triton itself uses in requests or responses")
            if field != "triton_output_field":
                if name in names:
                    raise bad(field, f"must differ from {names[name]} (both are {name!r})")
                names[name] = field

    # -- command line -------------------------------------------------------------------------
    def to_argv(self) -> list[str]:
        """Flags that reproduce this config on `capacity simulate` (defaults left out)."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + f.name.replace("_", "-"))
            else:
                argv += [flag, str(value)]
        return argv

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            kind = _type_of(f.type)
            if kind is bool:
                parser.add_argument(flag, "--no-" + flag[2:], dest=f.name, action=_OnOff, nargs=0,
                                    default=f.default, help=_HELP.get(f.name))
            else:
                parser.add_argument(flag, dest=f.name, type=_flag_type(kind, flag), default=f.default,
                                    metavar=kind.__name__.upper(),
                                    help=f"{_HELP.get(f.name, '')} (default {f.default})")

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> SimConfig:
        try:
            return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})
        except _FieldError as e:
            raise UserError(f"--{e.field.replace('_', '-')}: {e.why}") from None

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)


# The OpenAI form's reasoning delta keys: vLLM's and SGLang's `reasoning_content`, the newer `reasoning`.
REASONING_FIELDS = ("reasoning_content", "reasoning")

# Keys of a generate request / response that are Triton's, not the model's.
_TRITON_RESERVED = frozenset({"id", "parameters", "model_name", "model_version", "error", "stream"})
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _FieldError(UserError):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


_HELP = {
    "model": "model name served (requests naming another model get a 404)",
    "max_model_len": "context length: prompt + max_tokens above it gets vLLM's 400",
    "max_num_seqs": "running slots in the continuous batch",
    "kv_cache_tokens": "KV budget: prompt + generated tokens of running requests",
    "prefill_tokens_per_s": "prefill speed",
    "decode_base_ms": "decode step time with an empty batch",
    "decode_per_seq_ms": "added to the decode step per running request",
    "prefix_cache": "reuse cached 16-token prompt blocks (faster prefill, vllm:prefix_cache_* counters)",
    "block_size": "prefix-cache block size in tokens",
    "default_max_tokens": "output limit when a request sets none",
    "force_max_tokens": "every request runs to its max, as if ignore_eos were set",
    "tokens_per_write": "tokens coalesced into one stream write",
    "reasoning_tokens": "the first N output tokens are reasoning deltas",
    "reasoning_tokens_max": "0: every request reasons --reasoning-tokens; above it, a uniform draw from that to this",
    "reasoning_field": "OpenAI streams' reasoning key: reasoning_content (vLLM, SGLang) or reasoning",
    "reasoning_usage": "OpenAI usage carries completion_tokens_details.reasoning_tokens (OpenAI's API does)",
    "triton_input_field": "Triton generate: the key holding the prompt",
    "triton_max_tokens_field": "Triton generate: the key (top level or in parameters) holding the output limit",
    "triton_output_field": "Triton generate: the key holding the generated text in each response",
    "triton_cumulative": "Triton generate_stream: each event carries the whole text so far, not the delta",
    "service_jitter_cv": "coefficient of variation of a per-request factor (mean 1) on prefill and decode time",
    "batch_delay_ms": "hold waiting requests up to this long for enough to fill the free slots",
    "no_usage": "OpenAI streams never carry usage, even with stream_options.include_usage (llama.cpp-like)",
    "seed": "seed for output lengths and fault draws",
    "lora_adapters": "LoRA adapters served beside the base model, named lora-1 … lora-N (vLLM's --lora-modules)",
    "max_loras": "adapters one batch may hold at once (vLLM's --max-loras); requests of others wait",
    "lora_swap_ms": "loading an adapter not in a GPU slot stalls the engine step this long",
    "image_tile_px": "an image costs ceil(W / this) × ceil(H / this) tiles (+1 thumbnail when more than one)",
    "image_tokens_per_tile": "prompt tokens per image tile",
    "image_max_tiles": "at most this many tiles per image (the thumbnail on top)",
    "error_rate": "fraction of requests answered 500/503 at once",
    "queue_limit_429": "answer 429 when this many requests already wait (0 = off)",
    "disconnect_prob": "probability a stream's connection is cut mid-way",
    "stall_s": "length of a stall, seconds",
    "stall_prob": "probability a response stalls for --stall-s",
    "malformed_prob": "probability one stream chunk is not valid JSON",
    "stream_error_prob": "probability of an error event inside a 200 stream",
    "gpu_memory_mib": "simulated GPU memory (DCGM_FI_DEV_FB_*)",
}


class _OnOff(argparse.Action):
    """`--x` sets True, `--no-x` False. argparse's BooleanOptionalAction decides by the `--no-`
    prefix, which reads `--no-usage` (the flag of the `no_usage` field) as False."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string == self.option_strings[0])


def _type_of(annotation: Any) -> type:
    # `from __future__ import annotations` leaves field types as strings.
    return {"int": int, "float": float, "bool": bool, "str": str}[str(annotation)]


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    kind = _type_of(annotation)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{where}: must be true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise UserError(f"{where}: must be an integer")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise UserError(f"{where}: must be a number")
    if isinstance(value, str):
        return value
    raise UserError(f"{where}: must be a string")


def _flag_type(kind: type, flag: str) -> Any:
    def convert(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            noun = {int: "an integer", float: "a number"}.get(kind, "a string")
            raise argparse.ArgumentTypeError(f"{flag}: must be {noun}, got {text!r}") from None

    convert.__name__ = kind.__name__
    return convert
