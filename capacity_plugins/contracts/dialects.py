"""Names of the API dialects, as scenarios, flags, records and the registry spell them, and the
settings of the one dialect that has any (`triton-generate`: the field names are the model's).

The scenario (`target.triton`), the command line (`--triton-*`) and the dialect all read
`TritonFields`, so each rule below is written once; each source reports a problem in its own
terms (a scenario field path, a flag).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

TRITON_GENERATE: Final = "triton-generate"
DIALECTS: Final[tuple[str, ...]] = ("openai-chat", "openai-completions", "tgi", "ollama", "ollama-generate",
                                    TRITON_GENERATE)

# Where the sampling settings (the output limit, temperature, top_p, stream, ...) go in a Triton
# generate body: top-level keys or the `parameters` object. Triton itself maps both alike (each
# key becomes the model's input tensor of that name, or else a request parameter); a proxy or a
# custom frontend may not.
TRITON_PLACEMENTS: Final[tuple[str, ...]] = ("top", "parameters")
# What each streamed event's output carries: `auto` detects it from the stream.
TRITON_OUTPUTS: Final[tuple[str, ...]] = ("auto", "delta", "cumulative")

# Keys the request itself uses: a field of the model's cannot take one of these names.
_REQUEST_KEYS = frozenset({"parameters", "id", "stream", "exclude_input_in_output", "temperature", "top_p",
                           "ignore_eos", "min_tokens"})
# Keys Triton writes next to the outputs in every response object.
_RESPONSE_KEYS = frozenset({"model_name", "model_version", "id", "error"})


@dataclass(frozen=True, slots=True)
class TritonFields:
    """How one Triton model spells its generate request and response (its backend decides).

    Defaults are the TensorRT-LLM ensemble's and the vLLM backend's names.
    """

    input_field: str = "text_input"  # the prompt (an input tensor)
    max_tokens_field: str = "max_tokens"  # the output limit (an input tensor or a sampling parameter)
    output_field: str = "text_output"  # the generated text in each response
    params_in: str = "top"  # TRITON_PLACEMENTS
    outputs: str = "auto"  # TRITON_OUTPUTS

    def problem(self) -> tuple[str, str] | None:
        """The first bad setting as (its key, why), or None when all are usable."""
        for key in ("input_field", "max_tokens_field", "output_field"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip() or value != value.strip():
                return key, f"must be a non-empty key without surrounding spaces, got {value!r}"
            reserved = _RESPONSE_KEYS if key == "output_field" else _REQUEST_KEYS
            if value in reserved:
                return key, f"{value!r} is a key the generate API itself uses"
        if self.max_tokens_field == self.input_field:
            return "max_tokens_field", f"must differ from input_field (both are {self.input_field!r})"
        if self.params_in not in TRITON_PLACEMENTS:
            return "params_in", f"must be one of {', '.join(TRITON_PLACEMENTS)}, got {self.params_in!r}"
        if self.outputs not in TRITON_OUTPUTS:
            return "outputs", f"must be one of {', '.join(TRITON_OUTPUTS)}, got {self.outputs!r}"
        return None


TRITON_KEYS: Final[tuple[str, ...]] = tuple(f.name for f in fields(TritonFields))
