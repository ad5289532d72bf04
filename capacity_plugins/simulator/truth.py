"""The truth log: what the server did for each request, one JSON line written when it ends.

Fields (times in seconds; `*_s` offsets are after `arrival`, the moment the request body was
fully read; token times are when the write call was issued): `id` (the response id / the
`x-request-id` header), `dialect`, `arrival_unix`, `queue_s`, `prefill_s` (joined the batch →
first token generated), `first_token_s`, `token_times_s`, `tokens_per_write`, `prompt_tokens`,
`output_tokens` (tokens written to the client), `generated_tokens`, `finish_reason`, `stream`,
`status`, `error_kind` (`http_4xx`, `http_429`, `http_5xx`, `stream_cut`, `server_error`,
`malformed`, `cancelled` or null), and for requests that reached the engine `decode_s` (first →
last token generated) and `e2e_s` (arrival → last token; both null unless the engine finished
it), `cached_tokens` (prefix-cache hits) and `service_factor` (the jitter factor, 1.0 without). Flushed per line so a killed simulator loses nothing finished. A streamed request's line is
written before the stream's last bytes; a non-streamed one's just after its body (it holds the
write time), so a reader racing the server should use `read_truth(path, min_rows)`.
"""

from __future__ import annotations

import time
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


def read_truth(path: Path, min_rows: int = 0, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """The truth log's rows, waiting up to `timeout_s` until there are at least `min_rows`."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = []
        if path.exists():
            lines = path.read_bytes().split(b"\n")
            rows = [orjson.loads(line) for line in lines[:-1]]  # the last piece may be half-written
        if len(rows) >= min_rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.01)
