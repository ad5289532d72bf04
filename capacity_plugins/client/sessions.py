"""Multi-turn conversations of a trace replay (`load.sessions`), one store per process.

A session's turns all arrive at the same process (corpus.trace.session_shard). A turn waits until
the session's previous turn has finished (a user does not send turn 3 before reading answer 2;
its wait counts in the latency from the scheduled time), then sends the history — every earlier
turn's message and the server's answer — followed by its own message. A failed turn keeps its
message in the history without an answer. No Locust import; gevent only for the wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Session:
    messages: list[dict[str, Any]] = field(default_factory=list)
    busy: Any = None  # a gevent Event while a turn is in flight


class SessionStore:
    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}

    def begin(self, session_id: str, timeout_s: float) -> list[dict[str, Any]]:
        """Wait (up to timeout_s) for the session's turn in flight to end, mark a new one in flight,
        and return a copy of the history to send before this turn's message."""
        from gevent.event import Event

        s = self._sessions.setdefault(session_id, _Session())
        if s.busy is not None:
            s.busy.wait(timeout=timeout_s)
        s.busy = Event()
        return list(s.messages)

    def end(self, session_id: str, user_text: str, answer: str | None) -> None:
        """The turn finished: its message (and the answer, when there is one) join the history."""
        s = self._sessions.setdefault(session_id, _Session())
        s.messages.append({"role": "user", "content": user_text})
        if answer:
            s.messages.append({"role": "assistant", "content": answer})
        if s.busy is not None:
            s.busy.set()
            s.busy = None

    def __len__(self) -> int:
        return len(self._sessions)
