"""Reading a scenario file: YAML, `${VAR}` expansion, validation, one-line errors.

Every problem becomes one `UserError` line that names the file and the field path
(`quick.yaml: load.levels[2]: Input should be greater than 0`) or the YAML line.
"""

from __future__ import annotations

import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from capacity_plugins import kinds
from capacity_plugins.errors import UserError, did_you_mean
from capacity_plugins.scenario.model import Scenario, _resolve_corpus

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# The load kinds, as pydantic names the union members in an error location.
_LOAD_TAGS = kinds.names()


def _expand_env(obj: Any, loc: str, used: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _expand_env(v, f"{loc}.{k}" if loc else str(k), used) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand_env(v, f"{loc}[{i}]", used) for i, v in enumerate(obj)]
    if not isinstance(obj, str) or "${" not in obj:
        return obj

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        value = os.environ.get(name)
        if value is None or value == "" and default is not None:
            if default is None:
                raise _FieldError(loc, f"environment variable {name} is not set (write ${{{name}:-default}} for a fallback)")
            return default
        used.add(name)
        return value

    return _ENV_REF.sub(sub, obj)


class _FieldError(Exception):
    def __init__(self, loc: str, msg: str) -> None:
        super().__init__(f"{loc}: {msg}")


def format_loc(loc: tuple[int | str, ...]) -> str:
    """pydantic's ('load', 'rate_sweep', 'levels', 2) → 'load.levels[2]' (union tags dropped)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # Discriminated-union tags and wrapper names are not keys the user wrote.
        if i > 0 and loc[i - 1] == "load" and part in _LOAD_TAGS:
            continue
        if part.startswith(("function-", "list[", "dict[")) or part in ("str", "int", "float", "bool"):
            continue
        out += f".{part}" if out else part
    return out


def _leaves(annotation: Any) -> list[Any]:
    """The types a field can hold: Annotated, Optional and unions unwrapped (list[X] kept)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _leaves(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [leaf for arg in typing.get_args(annotation) for leaf in _leaves(arg)]
    return [annotation]


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _tag_of(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("kind")
    return None if field is None else field.default


def _known_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model allows at pydantic's error location `loc` (the unknown key's parent):
    ('load', 'concurrency_sweep') → the concurrency sweep's keys. Empty when it cannot be told."""
    here: list[Any] = [model]
    for part in loc:
        if isinstance(part, int):  # a list item: the list's element type
            here = [leaf for t in here if typing.get_origin(t) is list for leaf in _leaves(typing.get_args(t)[0])]
            continue
        models = [t for t in here if _is_model(t)]
        if len(models) > 1 and any(_tag_of(m) == part for m in models):  # a discriminated union's tag
            here = [m for m in models if _tag_of(m) == part]
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return []
        here = [leaf for f in fields for leaf in _leaves(f.annotation)]
    models = [t for t in here if _is_model(t)]
    return [name for m in models for name, f in m.model_fields.items() if not f.exclude]


def _written(raw: Any, loc: tuple[int | str, ...]) -> Any:
    """The value as the file wrote it (before `${VAR}` expansion) at pydantic's location; None if absent."""
    for part in loc:
        if isinstance(raw, list) and isinstance(part, int):
            raw = raw[part] if part < len(raw) else None
        elif isinstance(raw, dict) and part in raw:
            raw = raw[part]
        elif isinstance(raw, dict) and part in _LOAD_TAGS:
            continue  # a union tag pydantic adds, not a key of the file
        else:
            return None
    return raw


def _first_error(e: ValidationError, model: type[BaseModel] = BaseModel, raw: Any = None) -> str:
    errors = e.errors(include_url=False)
    # A misspelt key also leaves its field missing or its default clashing: the typo comes first.
    err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    where = tuple(err["loc"])
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        hint = did_you_mean(where[-1], _known_keys(model, where[:-1]))
        msg = "unknown key" + (hint or " (check the spelling; see scenarios/*.yaml for every key)")
        if len(where) > 2 and where[0] == "load" and where[1] in _LOAD_TAGS:
            msg = f"unknown key for load kind {where[1]}{hint}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        # A section's own check that names one of its keys ("url: ...") is that key's error.
        named = re.match(r"([A-Za-z_][A-Za-z0-9_]*): (.*)", msg, re.DOTALL)
        if named and named.group(1) in _known_keys(model, where):
            where, msg = (*where, named.group(1)), named.group(2)
    elif err["type"] == "union_tag_invalid":
        msg = kinds.unknown((err.get("ctx") or {}).get("tag"))
    written = _written(raw, where)
    if isinstance(written, str) and "${" in written:
        msg += f" (from {written})"  # the value came from the environment: name the variable
    loc = format_loc(where)
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{loc}: {msg}{more}" if loc else f"{msg}{more}"


def parse_scenario(data: Any, where: str = "scenario", source: Path | None = None) -> Scenario:
    """Validate an already-parsed mapping; `where` prefixes every error (usually the file name)."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: the scenario must be a mapping of keys (name:, target:, load:, ...)")
    used: set[str] = set()
    written = data
    try:
        data = _expand_env(data, "", used)
    except _FieldError as e:
        raise UserError(f"{where}: {e}") from None
    try:
        scenario = Scenario.model_validate({**data, "source_path": source, "expanded_env": tuple(sorted(used))})
    except ValidationError as e:
        raise UserError(f"{where}: {_first_error(e, Scenario, written)}") from None
    if scenario.target.simulator is not None:
        _check_simulator(scenario.target.simulator, where)
    if scenario.corpus.is_file:
        path = _resolve_corpus(scenario.corpus.path, source)
        if not path.is_file():
            raise UserError(f"{where}: corpus.path: file not found: {path}")
    trace = scenario.trace_path()
    if trace is not None and not trace.is_file():
        raise UserError(f"{where}: load.path: trace file not found: {trace}")
    for i, w in enumerate(scenario.workloads or ()):
        spec = scenario.class_corpus_path(w)
        if spec is not None and w.corpus.is_file and not Path(spec).is_file():
            raise UserError(f"{where}: workloads[{i}].corpus.path: file not found: {spec}")
    return scenario


def _check_simulator(settings: dict[str, Any], where: str) -> None:
    try:
        from capacity_plugins.simulator.config import SimConfig
    except ImportError:  # the simulator is another part; without it, settings are checked when it starts
        return
    try:
        SimConfig.from_mapping(settings, where="target.simulator")
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: cannot read scenario: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{p}{line}: YAML syntax error: {problem}") from None
    if data is None:
        raise UserError(f"{p}: the scenario file is empty (target.url is required)")
    return parse_scenario(data, where=str(p), source=p.resolve())
