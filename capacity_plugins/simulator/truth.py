"""The truth log: what the server did for each request, one JSON line written when it ends.

Fields (times in seconds; `*_s` offsets are after `arrival`, the moment the request body was
fully read; token times are when the write call returned): `id` (the response id / the
`x-request-id` header), `dialect`, `arrival_unix`, `queue_s`, `prefill_s` (joined the batch →
first token generated), `first_token_s`, `token_times_s`, `tokens_per_write`, `prompt_tokens`,
`output_tokens` (tokens written to the client), `generated_tokens`, `finish_reason`, `stream`,
`status`, `error_kind` (`http_4xx`, `http_429`, `http_5xx`, `stream_cut`, `server_error`,
`malformed`, `cancelled` or null). Flushed per line so a killed simulator loses nothing finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


class TruthLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "ab")  # noqa: SIM115 (lives as long as the server)

    def write(self, row: dict[str, Any]) -> None:
        self._f.write(orjson.dumps(row) + b"\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
