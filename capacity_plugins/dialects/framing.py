"""Incremental SSE and NDJSON framing.

The body reader (client/stream.py) hands complete lines here — through dialects/fastpath.py, which
frames the common `data: {...}` + blank line itself and comes here for everything else. These
decoders only frame events; what an event means is a dialect's job. Kept free of JSON parsing so
the hot path parses each payload at most once (in the dialect).
"""

from __future__ import annotations

from capacity_plugins.dialects.base import MalformedEvent

# The most one SSE event may hold (its data lines together): the same 16 MiB the body reader
# allows one line (client/stream.py), so no server can make the client buffer without bound.
MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEDecoder:
    """Turns SSE lines into event payloads (the joined `data:` lines of one event).

    Handles CRLF and LF endings, `:` comment lines, `event:`/`id:`/`retry:` fields, multi-line data
    (joined with "\\n" as the SSE spec says), and a stream that ends without a blank line or without
    `[DONE]` (call `flush()` at EOF).
    """

    __slots__ = ("_data", "_size", "event")

    def __init__(self) -> None:
        self._data: list[bytes] = []
        self._size = 0  # bytes of data in the event being built
        self.event: bytes | None = None  # the `event:` field of the event being built

    def feed(self, line: bytes) -> bytes | None:
        """One raw line (terminator included or not) → the payload if it completed an event.

        Servers in practice send `data: {...}\\n\\n`; dispatching on the data line itself when the
        event cannot continue would save nothing measurable, so we follow the spec: a blank line
        ends the event. The blank line arrives in the same TCP write as the data line.
        """
        line = line.rstrip(b"\r\n")
        if not line:
            if not self._data:
                return None
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            self._data, self._size = [], 0
            return data
        if line.startswith(b"data:"):
            value = line[5:]
            if value[:1] == b" ":
                value = value[1:]
            self._size += len(value) + 1
            if self._size > MAX_EVENT_BYTES:
                # Lines are bounded by the reader; an event of endless short lines is bounded here.
                raise MalformedEvent(f"an event of over {MAX_EVENT_BYTES} bytes without its ending blank line")
            self._data.append(value)
        elif line[:1] == b":":
            pass  # comment / keep-alive
        elif line.startswith(b"event:"):
            self.event = line[6:].strip()
        return None

    @property
    def idle(self) -> bool:
        """No event is being built: the next `data:` line starts a new one."""
        return not self._data

    def flush(self) -> bytes | None:
        """At end of body: the payload of an event the server did not terminate with a blank line."""
        if not self._data:
            return None
        data = b"\n".join(self._data)
        self._data, self._size = [], 0
        return data


class NDJSONDecoder:
    """One JSON document per non-empty line (Ollama streaming)."""

    __slots__ = ()

    @property
    def idle(self) -> bool:
        return True  # every line is a whole document

    def feed(self, line: bytes) -> bytes | None:
        line = line.strip()
        return line or None

    def flush(self) -> bytes | None:
        return None
