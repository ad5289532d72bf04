"""MATRIX.yaml: one scenario, several server configurations. Read and checked before anything starts.

Every problem is one `UserError` line naming the file, its line and the field
(`m.yaml:9: entries[1].gpus: must be an integer >= 1`), so `capacity matrix` exits 2 with no
folder created and no command run. The format is documented in docs/matrix.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from capacity_plugins.errors import UserError, did_you_mean

PORT = "{port}"  # replaced, in command / url / ready.url / teardown / env, by a free port the matrix picks
DEFAULT_URL = f"http://127.0.0.1:{PORT}"
READY_TIMEOUT_S = 300.0  # a command that loads a model (vLLM) takes minutes
READY_TIMEOUT_URL_S = 30.0  # a server already running answers at once, or it is down
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP_KEYS = ("name", "description", "scenario", "output", "entries")
_ENTRY_KEYS = ("name", "url", "command", "ready", "teardown", "gpus", "gpu_hour_usd", "env")
_READY_KEYS = ("url", "timeout_s")


@dataclass(frozen=True)
class Ready:
    url: str | None  # a path on the entry's URL ("/health") or a full URL; None: the dialect's default
    timeout_s: float


@dataclass(frozen=True)
class Entry:
    name: str
    url: str  # may contain {port}
    command: str | None
    ready: Ready
    teardown: str | None
    gpus: int | None  # None: the scenario's capacity.gpus_per_node
    gpu_hour_usd: float | None  # None: the scenario's capacity.gpu_hour_usd
    env: dict[str, str] = field(default_factory=dict)

    @property
    def needs_port(self) -> bool:
        texts = [self.url, self.command or "", self.teardown or "", self.ready.url or "", *self.env.values()]
        return any(PORT in t for t in texts)


@dataclass(frozen=True)
class Matrix:
    path: Path
    name: str
    description: str | None
    scenario: Path
    output: str
    entries: list[Entry]


class _Doc:
    """The parsed YAML plus the line of every value, for one-line errors."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        try:
            self.node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise UserError(f"{path}{line}: YAML syntax error: {problem}") from None

    def _line(self, loc: tuple[str | int, ...]) -> int | None:
        node = self.node
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                hit = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
                if hit is None:
                    break
                line, node = hit[0].start_mark.line + 1, hit[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def error(self, loc: tuple[str | int, ...], msg: str) -> UserError:
        line = self._line(loc)
        where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(loc))
        return UserError(f"{self.path}{f':{line}' if line else ''}: {where + ': ' if where else ''}{msg}")


def _check_url(doc: _Doc, loc: tuple[str | int, ...], url: Any, path_ok: bool = False) -> str:
    if not isinstance(url, str) or not url.strip():
        raise doc.error(loc, "must be a URL string")
    if path_ok and url.startswith("/"):
        return url
    parts = urlsplit(url.replace(PORT, "1"))
    try:
        parts.port  # noqa: B018 -- raises on a non-numeric or out-of-range port
    except ValueError:
        raise doc.error(loc, f"{url!r}: the port is not a number between 0 and 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise doc.error(loc, f"{url!r} is not an http(s)://host[:port] URL" + (" or a /path" if path_ok else ""))
    return url.rstrip("/")


def _number(doc: _Doc, loc: tuple[str | int, ...], v: Any, *, integer: bool, low: float, low_ok: bool) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < low or (v == low and not low_ok):
        kind = "an integer" if integer else "a number"
        raise doc.error(loc, f"must be {kind} {'>=' if low_ok else '>'} {low:g}, got {v!r}")
    return v


def _string(doc: _Doc, loc: tuple[str | int, ...], v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise doc.error(loc, "must be a non-empty string")
    return v


def _unknown(doc: _Doc, loc: tuple[str | int, ...], d: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in d:
        if key not in known:
            hint = did_you_mean(key, known) or f" (known: {', '.join(known)})"
            raise doc.error((*loc, str(key)), f"unknown key{hint}")


def _entry(doc: _Doc, i: int, d: Any) -> Entry:
    loc: tuple[str | int, ...] = ("entries", i)
    if not isinstance(d, dict):
        raise doc.error(loc, "must be a mapping with name and url or command")
    _unknown(doc, loc, d, _ENTRY_KEYS)
    if "name" not in d:
        raise doc.error(loc, "name: required")
    name = d["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise doc.error((*loc, "name"), "must be letters, digits, '.', '_' or '-' (it names a folder)")
    command = _string(doc, (*loc, "command"), d["command"]) if d.get("command") is not None else None
    if command is None and d.get("url") is None:
        raise doc.error(loc, "needs a url (a server already running) or a command that starts it")
    url = _check_url(doc, (*loc, "url"), d["url"]) if d.get("url") is not None else DEFAULT_URL
    if command is None and PORT in url:
        raise doc.error((*loc, "url"), f"{PORT} is a port the matrix picks for a command to listen on: "
                        "an entry without a command needs the server's own URL")
    ready = d.get("ready") or {}
    if not isinstance(ready, dict):
        raise doc.error((*loc, "ready"), "must be a mapping: {url: /path or URL, timeout_s: N}")
    _unknown(doc, (*loc, "ready"), ready, _READY_KEYS)
    ready_url = _check_url(doc, (*loc, "ready", "url"), ready["url"], path_ok=True) if ready.get("url") else None
    default_timeout = READY_TIMEOUT_S if command else READY_TIMEOUT_URL_S
    timeout = ready.get("timeout_s", default_timeout)
    timeout = float(_number(doc, (*loc, "ready", "timeout_s"), timeout, integer=False, low=0, low_ok=False))
    teardown = _string(doc, (*loc, "teardown"), d["teardown"]) if d.get("teardown") is not None else None
    gpus = d.get("gpus")
    if gpus is not None:
        gpus = _number(doc, (*loc, "gpus"), gpus, integer=True, low=1, low_ok=True)
    price = d.get("gpu_hour_usd")
    if price is not None:
        price = float(_number(doc, (*loc, "gpu_hour_usd"), price, integer=False, low=0, low_ok=False))
    env_in = d.get("env") or {}
    if not isinstance(env_in, dict):
        raise doc.error((*loc, "env"), "must be a mapping NAME: value")
    env: dict[str, str] = {}
    for k, v in env_in.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise doc.error((*loc, "env", str(k)), "not an environment variable name")
        if isinstance(v, dict | list) or v is None:
            raise doc.error((*loc, "env", k), "must be a string or a number")
        env[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return Entry(name=name, url=url, command=command, ready=Ready(ready_url, timeout), teardown=teardown,
                 gpus=gpus, gpu_hour_usd=price, env=env)


def _scenario_path(doc: _Doc, value: Any) -> Path:
    text = _string(doc, ("scenario",), value)
    here = doc.path.resolve().parent / text
    for candidate in (here, Path(text)):
        if candidate.is_file():
            return candidate.resolve()
    raise doc.error(("scenario",), f"{text}: no such file (relative paths are read next to {doc.path.name} first)")


def load_matrix(path: str | Path) -> Matrix:
    """The matrix file, checked; UserError (one line: file, line, field) otherwise."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: matrix file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: cannot read the matrix file: {e}") from None
    doc = _Doc(p, text)
    d = doc.data
    if not isinstance(d, dict):
        raise doc.error((), "expected a mapping with scenario and entries")
    _unknown(doc, (), d, _TOP_KEYS)
    name = d.get("name", p.stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise doc.error(("name",), "must be letters, digits, '.', '_' or '-' (it names the results folder)")
    if "scenario" not in d:
        raise doc.error((), "scenario: required (the scenario file every entry runs)")
    scenario = _scenario_path(doc, d["scenario"])
    output = _string(doc, ("output",), d.get("output", "results/"))
    description = d.get("description")
    if description is not None and not isinstance(description, str):
        raise doc.error(("description",), "must be a string")
    items = d.get("entries")
    if not isinstance(items, list) or not items:
        raise doc.error(("entries",), "must be a non-empty list of server configurations")
    entries = [_entry(doc, i, e) for i, e in enumerate(items)]
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.name in seen:
            raise doc.error(("entries", i, "name"), f"{entry.name!r} is used twice (each entry gets its own folder)")
        seen.add(entry.name)
    return Matrix(path=p, name=name, description=description, scenario=scenario, output=output, entries=entries)
