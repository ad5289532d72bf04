"""Multi-turn conversations: a trace replay's (`load.sessions`, one store per process) and an agentic
session's walk through its script (`run_agentic`, one user's sequence: load.kind agentic).

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


# -- agentic sessions (load.kind agentic; corpus/agentic.py) ---------------------------------------------


@dataclass
class Answer:
    """What one model call of a session came back with (the user's `send`)."""

    ok: bool
    text: str | None  # the generated text (all channels), kept for the history
    calls: list[list[str]]  # the tool calls streamed: [id, name, arguments]
    sent_unix: float


@dataclass
class SessionOutcome:
    calls: int = 0  # model calls sent
    completed: bool = False  # every scripted model call answered
    waits_s: list[float] = field(default_factory=list)  # each tool latency waited, in order
    cut: str | None = None  # why it stopped early: "failed" (a call failed), "stopped" (the step closed)


def assistant_message(answer: Answer, scripted: Any, k: int) -> tuple[dict[str, Any], list[str]]:
    """The answer as the history's assistant message, and the tool-call ids its tool results answer.

    The calls the server streamed, in order; a scripted call the answer lacks (a real model may
    decide otherwise) is added with empty arguments so every tool result answers a call."""
    names = [c.name for c in scripted.tool_calls]
    got = [c for c in answer.calls if c[1] or c[2]]
    calls: list[dict[str, Any]] = []
    for j, name in enumerate(names):
        cid, fn, args = got[j] if j < len(got) else ["", name, "{}"]
        calls.append({"id": cid or f"call_{k}_{j}", "type": "function",
                      "function": {"name": fn or name, "arguments": args or "{}"}})
    if not calls:
        return {"role": "assistant", "content": answer.text or ""}, []
    return {"role": "assistant", "content": None, "tool_calls": calls}, [str(c["id"]) for c in calls]


def run_agentic(script: Any, run_id: str, *, send: Any, wait: Any, clock: Any, may_send: Any,
                rng: Any) -> SessionOutcome:
    """Walk one session script (corpus/agentic.py SessionScript) as one user: each assistant turn
    is a model call with the whole history (`send(sample) -> Answer`), each tool turn waits the
    tool's latency (`wait(seconds)`, timed by `clock()`) and appends its result. A failed call ends
    the session (its history would be wrong); so does the step's window closing (`may_send()`
    false before a call or a tool). No Locust or gevent here: the user passes its sleep and its call."""
    from capacity_plugins.corpus.agentic import message_text, model_call

    out = SessionOutcome()
    history: list[dict[str, Any]] = []
    total = script.model_calls
    start: float | None = None
    waited_ms: float | None = None
    owed: list[str] = []
    for i, turn in enumerate(script.turns):
        if turn.role == "user":
            history.append({"role": "user", "content": message_text(turn, f"{run_id}:{i}")})
        elif turn.role == "tool":
            if not may_send():  # the step's window closed: no tool to wait for, no call after it
                out.cut = "stopped"
                return out
            seconds = turn.wait_s(rng)
            t0 = clock()
            wait(seconds)
            out.waits_s.append(seconds)
            waited_ms = (waited_ms or 0.0) + (clock() - t0) * 1000.0
            history.append({"role": "tool", "tool_call_id": owed.pop(0) if owed else f"call_{i}",
                            "content": message_text(turn, f"{run_id}:{i}")})
        else:
            if not may_send():
                out.cut = "stopped"
                return out
            out.calls += 1
            sample = model_call(script, run_id, turn, out.calls, history, last=out.calls == total,
                                tool_wait_ms=waited_ms, start_unix=start)
            answer = send(sample)
            if start is None:
                start = answer.sent_unix
            if not answer.ok:
                out.cut = "failed"
                return out
            message, owed = assistant_message(answer, turn, out.calls)
            history.append(message)
            waited_ms = None
    out.completed = True
    return out
