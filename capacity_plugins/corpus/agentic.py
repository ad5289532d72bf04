"""Agentic sessions (`load.kind: agentic`; docs/traffic.md "Agentic sessions"): the session script
format, read and checked, and the requests a script's model calls send.

One JSON object a line, one session each:

    {"session_id": "s1", "turns": [
      {"role": "user", "tokens": 300},
      {"role": "assistant", "output_tokens": 40, "tool_calls": [{"name": "search"}]},
      {"role": "tool", "latency_s": 0.8, "result_tokens": 600},
      {"role": "assistant", "output_tokens": 120}]}

- `user`: a message joins the history (`content`, or `tokens` of synthetic text);
- `assistant`: one model call with the whole history so far, asking for `output_tokens`;
  `tool_calls` (names, optionally `arguments_tokens`) are the tools the call offers and asks for
  (`tool_choice`: the one named, or `required` for several) — a real model decides itself, the
  simulator calls exactly these;
- `tool`: after an assistant turn with tool calls, one per call in order: the client waits
  `latency_s` (seconds, or a distribution `{"dist": "exponential", "mean": 0.5}`,
  `{"dist": "uniform", "low": 0.1, "high": 0.9}`, `{"dist": "lognormal", "median": 0.5, "sigma": 0.6}`),
  then appends the tool's result of `result_tokens` synthetic tokens (or `content`).

A session is one Locust user's sequence from its first turn to its last, so it stays on one
generator process (its history lives there). No Locust, gevent or pandas here.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.corpus.sample import Sample
from capacity_plugins.corpus.synthetic import synthetic_text
from capacity_plugins.errors import UserError

_DISTS = {"exponential": ("mean",), "uniform": ("low", "high"), "lognormal": ("median", "sigma")}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments_tokens: int | None = None


@dataclass(frozen=True)
class Turn:
    """One line of a script's `turns`: role `user`, `assistant` or `tool`."""

    role: str
    content: str | None = None  # user / tool: the text as given (else synthetic, `tokens`)
    tokens: int = 0  # user: tokens of synthetic text; tool: the result's (`result_tokens`)
    output_tokens: int = 0  # assistant: max_tokens of the call
    tool_calls: tuple[ToolCall, ...] = ()  # assistant
    latency: float | dict[str, Any] | None = None  # tool: seconds, or a distribution

    def wait_s(self, rng: random.Random) -> float:
        """The tool's latency: the scripted seconds, or a draw of its distribution."""
        lat = self.latency
        if lat is None:
            return 0.0
        if isinstance(lat, (int, float)):
            return float(lat)
        dist = lat["dist"]
        if dist == "exponential":
            return rng.expovariate(1.0 / lat["mean"]) if lat["mean"] > 0 else 0.0
        if dist == "uniform":
            return rng.uniform(lat["low"], lat["high"])
        return lat["median"] * math.exp(rng.gauss(0.0, lat["sigma"]))


@dataclass(frozen=True)
class SessionScript:
    session_id: str
    turns: tuple[Turn, ...]
    line: int = 0

    @property
    def model_calls(self) -> int:
        return sum(1 for t in self.turns if t.role == "assistant")

    def to_message(self) -> dict[str, Any]:
        """As it travels to a worker (swarm Setup) and back (`from_message`)."""
        return {"session_id": self.session_id, "line": self.line, "turns": [_turn_json(t) for t in self.turns]}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> SessionScript:
        return parse_session(data, str(data.get("line", "?")), int(data.get("line", 0)))


def _turn_json(t: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"role": t.role}
    if t.role == "assistant":
        out["output_tokens"] = t.output_tokens
        if t.tool_calls:
            out["tool_calls"] = [{"name": c.name, **({"arguments_tokens": c.arguments_tokens}
                                                     if c.arguments_tokens is not None else {})}
                                 for c in t.tool_calls]
        return out
    if t.content is not None:
        out["content"] = t.content
    else:
        out["tokens" if t.role == "user" else "result_tokens"] = t.tokens
    if t.role == "tool":
        out["latency_s"] = t.latency
    return out


def _count(v: Any, where: str, name: str, minimum: int = 0) -> int:
    if type(v) is not int or v < minimum:
        raise UserError(f"{where}: {name} must be an integer >= {minimum}, got {orjson.dumps(v).decode()}")
    return v


def _latency(v: Any, where: str) -> float | dict[str, Any]:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and math.isfinite(v):
        return float(v)
    if isinstance(v, dict) and v.get("dist") in _DISTS:
        keys = _DISTS[v["dist"]]
        out: dict[str, Any] = {"dist": v["dist"]}
        for k in keys:
            x = v.get(k)
            if not isinstance(x, (int, float)) or isinstance(x, bool) or x < 0 or not math.isfinite(x):
                raise UserError(f"{where}: latency_s {v['dist']} needs {k} >= 0")
            out[k] = float(x)
        if v["dist"] == "uniform" and out["low"] > out["high"]:
            raise UserError(f"{where}: latency_s uniform needs low <= high")
        return out
    raise UserError(f"{where}: latency_s must be seconds >= 0 or "
                    f'{{"dist": {"|".join(_DISTS)}, ...}}, got {orjson.dumps(v).decode()}')


def parse_session(doc: Any, where: str, line: int) -> SessionScript:
    """One line's session; UserError naming `where` (file:line) and the field when it is wrong."""
    if not isinstance(doc, dict):
        raise UserError(f"{where}: a session must be a JSON object")
    sid = doc.get("session_id")
    if not isinstance(sid, (str, int)) or isinstance(sid, bool) or str(sid) == "":
        raise UserError(f"{where}: session_id must be a non-empty string")
    raw = doc.get("turns")
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}: turns must be a non-empty list")
    turns: list[Turn] = []
    pending = 0  # tool results still owed to the last assistant turn's calls
    for i, t in enumerate(raw):
        at = f"{where}: turns[{i}]"
        if not isinstance(t, dict):
            raise UserError(f"{at}: must be an object")
        role = t.get("role")
        content = t.get("content")
        if content is not None and not isinstance(content, str):
            raise UserError(f"{at}: content must be a string")
        if role == "user":
            if pending:
                raise UserError(f"{at}: {pending} tool result(s) of the previous assistant turn are missing")
            tokens = 0 if content is not None else _count(t.get("tokens"), at, "tokens", 1)
            turns.append(Turn("user", content=content, tokens=tokens))
        elif role == "assistant":
            if pending:
                raise UserError(f"{at}: {pending} tool result(s) of the previous assistant turn are missing")
            calls_raw = t.get("tool_calls") or []
            if not isinstance(calls_raw, list):
                raise UserError(f"{at}: tool_calls must be a list")
            calls = []
            for j, c in enumerate(calls_raw):
                if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
                    raise UserError(f"{at}: tool_calls[{j}]: needs a non-empty name")
                a = c.get("arguments_tokens")
                calls.append(ToolCall(c["name"], None if a is None else _count(a, at, f"tool_calls[{j}].arguments_tokens", 1)))
            out = _count(t.get("output_tokens"), at, "output_tokens", 1)
            if sum(c.arguments_tokens or 0 for c in calls) > out:
                raise UserError(f"{at}: the tool calls' arguments_tokens exceed output_tokens ({out})")
            turns.append(Turn("assistant", output_tokens=out, tool_calls=tuple(calls)))
            pending = len(calls)
        elif role == "tool":
            if not pending:
                raise UserError(f"{at}: a tool result with no tool call of an assistant turn before it to answer")
            tokens = 0 if content is not None else _count(t.get("result_tokens"), at, "result_tokens", 1)
            turns.append(Turn("tool", content=content, tokens=tokens, latency=_latency(t.get("latency_s", 0), at)))
            pending -= 1
        else:
            raise UserError(f"{at}: role must be user, assistant or tool, got {orjson.dumps(role).decode()}")
    if pending:
        raise UserError(f"{where}: the last assistant turn's {pending} tool call(s) have no tool result")
    if not any(t.role == "assistant" for t in turns):
        raise UserError(f"{where}: a session needs at least one assistant turn (a model call)")
    if turns[0].role != "user":
        raise UserError(f"{where}: turns[0] must be a user message")
    return SessionScript(str(sid), tuple(turns), line)


def read_sessions(path: str | Path) -> list[SessionScript]:
    """Every session of a JSONL script file; UserError (file:line, field) on the first bad line."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"{p}: cannot read the session file ({e.strerror or e})") from None
    out: list[SessionScript] = []
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise UserError(f"{p}:{n}: not JSON ({e})") from None
        s = parse_session(doc, f"{p}:{n}", n)
        if s.session_id in seen:
            raise UserError(f"{p}:{n}: session_id {s.session_id!r} appears twice")
        seen.add(s.session_id)
        out.append(s)
    if not out:
        raise UserError(f"{p}: no session in the file")
    return out


# -- what a model call sends ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AgenticSample(Sample):
    """One model call of a session: the history as messages, the tools it offers and asks for."""

    session_id: str | None = None
    turn: int | None = None  # the model call's index in its session, 1 = first
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    tool_wait_ms: float | None = None  # the tool latency the client waited before this call
    session_start_unix: float | None = None  # the session's first send (its completion time's start)
    last_turn: bool = False


def tool_schema(name: str) -> dict[str, Any]:
    """An OpenAI tool definition for `name`: one free-text argument (a real agent's schema would
    be its own; the model's answer length is what the script controls)."""
    return {"type": "function", "function": {
        "name": name, "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}}


def model_call(script: SessionScript, run_id: str, turn: Turn, index: int, history: list[dict[str, Any]], *,
               last: bool, tool_wait_ms: float | None, start_unix: float | None) -> AgenticSample:
    """The sample of the session's `index`-th model call (1-based) with `history` so far; its
    records' session_id is `run_id` (this run of the script: a script is run again and again)."""
    names = [c.name for c in turn.tool_calls]
    tools = [tool_schema(n) for n in dict.fromkeys(names)]
    if not names:
        choice: Any = None
    elif len(names) == 1:
        choice = {"type": "function", "function": {"name": names[0]}}
    else:
        choice = "required"
    base = Sample.make(f"session-{script.session_id}-{index}", messages=list(history), max_tokens=turn.output_tokens)
    return AgenticSample(base.id, None, base.messages, base.max_tokens, base.prompt_chars, base.prompt_tokens_est,
                         session_id=run_id, turn=index, tools=tools, tool_choice=choice,
                         tool_wait_ms=tool_wait_ms, session_start_unix=start_unix, last_turn=last)


def message_text(turn: Turn, seed: str) -> str:
    """A user or tool turn's text: as scripted, or `tokens` synthetic tokens seeded by `seed` (the
    session's run and the turn: runs share no prefix by accident, a prefix cache sees only the
    history each run grows)."""
    if turn.content is not None:
        return turn.content
    return synthetic_text(random.Random(f"session-{seed}"), turn.tokens, zh=False)


# -- captured and imported sessions (`capacity trace from-records`, `capacity trace from-aiperf`) ---------


def _script(session_id: str, calls: list[tuple[int, int, float, int]]) -> dict[str, Any]:
    """A session script from its model calls: (new input tokens, output tokens, wait before the
    call in seconds, ...) in order — the first call's input is the user's message, every later
    call's is one tool's result, its wait that tool's latency."""
    turns: list[dict[str, Any]] = [{"role": "user", "tokens": max(1, calls[0][0])}]
    for k, (_, out, _, _) in enumerate(calls):
        turn: dict[str, Any] = {"role": "assistant", "output_tokens": max(1, out)}
        if k + 1 < len(calls):
            nxt = calls[k + 1]
            turn["tool_calls"] = [{"name": "tool"}]
            turns.append(turn)
            turns.append({"role": "tool", "latency_s": round(max(0.0, nxt[2]), 4), "result_tokens": max(1, nxt[0])})
        else:
            turns.append(turn)
    return {"session_id": session_id, "turns": turns}


def sessions_from_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agentic sessions a run completed, as scripts that replay them: per session (records'
    `session_id`) its model calls by `turn`, the user's message = the first call's prompt tokens,
    each later call's new input (its prompt − the previous prompt − the previous answer) a tool
    result after the measured `tool_wait_ms`. Only sessions whose last call has `session_ms`
    (every call answered) and whose calls all have the server's prompt count."""
    by: dict[str, dict[int, dict[str, Any]]] = {}
    done: set[str] = set()
    for rec in records:
        sid, turn = rec.get("session_id"), rec.get("turn")
        if sid is None or not isinstance(turn, int) or not rec.get("ok"):
            continue
        by.setdefault(str(sid), {})[turn] = rec  # a retry's later attempt replaces the failed one
        if rec.get("session_ms") is not None:
            done.add(str(sid))
    out = []
    for sid in sorted(done):
        calls_by_turn = by[sid]
        turns = sorted(calls_by_turn)
        if turns != list(range(1, len(turns) + 1)):
            continue
        recs = [calls_by_turn[t] for t in turns]
        if any(not r.get("prompt_tokens") or not r.get("output_tokens") for r in recs):
            continue
        calls = []
        for k, r in enumerate(recs):
            new = int(r["prompt_tokens"]) - (int(recs[k - 1]["prompt_tokens"]) + int(recs[k - 1]["output_tokens"])
                                             if k else 0)
            calls.append((new, int(r["output_tokens"]), (r.get("tool_wait_ms") or 0.0) / 1000.0, k))
        out.append(_script(sid, calls))
    return out


def sessions_from_aiperf(path: Path) -> list[dict[str, Any]]:
    """AIPerf's multi-turn Mooncake trace (JSONL; the form its agentic traces are replayed in) as
    session scripts. A line: `session_id`, `input_length` (the turn's new tokens; `text_input`
    counted at 4 characters a token when it has none), `output_length`, `delay` (milliseconds
    the session waits after the previous turn's answer before sending this one: the agent's tool
    time). Lines sharing a `session_id` are one session, in file order; a line without one is a
    session of one call. Every turn after the first is a tool result that waited `delay`."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    sessions: dict[str, list[tuple[int, int, float, int]]] = {}
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise UserError(f"{where}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise UserError(f"{where}: a line must be a JSON object")
        inp = doc.get("input_length")
        if inp is None and isinstance(doc.get("text_input"), str):
            inp = max(1, math.ceil(len(doc["text_input"]) / 4))
        inp = _count(inp, where, "input_length", 1)
        out = _count(doc.get("output_length"), where, "output_length", 1)
        delay = doc.get("delay", 0) or 0
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or delay < 0:
            raise UserError(f"{where}: delay must be milliseconds >= 0, got {orjson.dumps(delay).decode()}")
        sid = doc.get("session_id")
        key = str(sid) if sid is not None else f"line-{n}"
        sessions.setdefault(key, []).append((inp, out, float(delay) / 1000.0, n))
    if not sessions:
        raise UserError(f"{path}: no request in the trace")
    return [_script(sid, calls) for sid, calls in sessions.items()]


def write_sessions(scripts: list[dict[str, Any]], out: Path) -> None:
    """Session scripts as JSONL, each checked as `read_sessions` would read it."""
    with Path(out).open("w", encoding="utf-8") as f:
        for i, s in enumerate(scripts, start=1):
            parse_session(s, f"{out}:{i}", i)
            f.write(orjson.dumps(s).decode() + "\n")
