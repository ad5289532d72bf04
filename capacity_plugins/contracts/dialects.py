"""Names of the API dialects, as scenarios, flags, records and the registry spell them, and the
settings of the one dialect that has any (`triton-generate`: the field names are the model's).

The scenario (`target.triton`), the command line (`--triton-*`) and the dialect all read
`TritonFields`, so each rule below is written once; each source reports a problem in its own
terms (a scenario field path, a flag).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final
from urllib.parse import urlsplit, urlunsplit

TRITON_GENERATE: Final = "triton-generate"
DIALECTS: Final[tuple[str, ...]] = ("openai-chat", "openai-completions", "tgi", "ollama", "ollama-generate",
                                    TRITON_GENERATE, "openai-embeddings", "tei-embed", "rerank", "tei-rerank")
# The dialects whose requests carry `batch_size` items and return one answer per item, whole (no
# stream, no output tokens): measured in items/s and judged on E2E latency (analysis/items.py).
ITEM_DIALECTS: Final[dict[str, str]] = {"openai-embeddings": "embeddings", "tei-embed": "embeddings",
                                        "rerank": "rerank", "tei-rerank": "rerank"}

# The dialects that can send images with a prompt (contracts/images.py): OpenAI chat's `image_url`
# content parts, Ollama chat's `images`.
IMAGE_DIALECTS: Final[tuple[str, ...]] = ("openai-chat", "ollama")

# The dialects an agentic session's model calls go through (load kind `agentic`): they send the
# tools and the history's tool calls and results, and parse the streamed tool calls back. Ollama
# parses tool calls in a stream but its history wants arguments as objects: not sent by it yet.
TOOL_DIALECTS: Final[tuple[str, ...]] = ("openai-chat",)

# The paths each dialect appends to the target URL, its request path first ("{model}": any one
# segment). The dialects (dialects/*.py) send to exactly these; a test keeps the two in step.
API_PATHS: Final[dict[str, tuple[str, ...]]] = {
    "openai-chat": ("/v1/chat/completions", "/v1/models"),
    "openai-completions": ("/v1/completions", "/v1/models"),
    "tgi": ("/generate_stream", "/generate", "/info"),
    "ollama": ("/api/chat", "/api/tags"),
    "ollama-generate": ("/api/generate", "/api/tags"),
    TRITON_GENERATE: ("/v2/models/{model}/generate_stream", "/v2/models/{model}/generate", "/v2/models/{model}",
                      "/v2/health/ready"),
    "openai-embeddings": ("/v1/embeddings", "/v1/models"),
    "tei-embed": ("/embed",),
    "rerank": ("/v1/rerank", "/v1/models"),
    "tei-rerank": ("/rerank",),
}


def url_path_problem(url: str, dialect: str) -> str | None:
    """Why a target URL cannot be used with `dialect`, or None: its path ends with (the start of)
    a path the dialect appends itself, so every request would go to /v1/v1/chat/completions.

    The URL is the server's root; a prefix that is not an API path (a reverse proxy's
    `http://gw/llm`) stays: the dialect's paths are appended to it. The answer names the URL to
    give instead, without credentials.
    """
    parts = urlsplit(url)
    segments = [seg for seg in parts.path.split("/") if seg]
    paths = API_PATHS.get(dialect, ())
    for i in range(len(segments)):  # the longest tail first: the root suggested is the shortest
        tail = segments[i:]
        for api in paths:
            api_segments = api.strip("/").split("/")
            if len(tail) <= len(api_segments) and all(a in ("{model}", t) for t, a in zip(tail, api_segments, strict=False)):
                host = parts.netloc.rpartition("@")[2]
                shown = urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
                root = urlunsplit((parts.scheme, host, "/".join(["", *segments[:i]]), "", ""))
                if i == 0:
                    return f"{shown} has a path ({parts.path}); give the server's root, {root} — the {dialect} dialect adds {paths[0]}"
                return (f"{shown} ends in /{'/'.join(tail)}, the start of the {dialect} dialect's own path; "
                        f"give {root} — the dialect adds {paths[0]}")
    return None


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
