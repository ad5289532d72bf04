"""Reading a scenario file: YAML, `${VAR}` expansion, validation, one-line errors.

Every problem becomes one `UserError` line that names the file and the field path
(`quick.yaml: load.levels[2]: Input should be greater than 0`) or the YAML line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from capacity_plugins.errors import UserError
from capacity_plugins.scenario.model import Scenario, _resolve_corpus

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# The load kinds, as pydantic names the union members in an error location.
_LOAD_TAGS = ("concurrency_sweep", "rate_sweep", "peak", "capacity_search", "cache_probe", "trace")


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


def _first_error(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    loc = format_loc(tuple(err["loc"]))
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling; see scenarios/*.yaml for every key)"
        raw = err["loc"]
        if len(raw) > 2 and raw[0] == "load" and raw[1] in _LOAD_TAGS:
            msg = f"unknown key for load kind {raw[1]}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif err["type"] == "union_tag_invalid":
        msg = f"kind must be one of {', '.join(_LOAD_TAGS)}"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{loc}: {msg}{more}" if loc else f"{msg}{more}"


def parse_scenario(data: Any, where: str = "scenario", source: Path | None = None) -> Scenario:
    """Validate an already-parsed mapping; `where` prefixes every error (usually the file name)."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: the scenario must be a mapping of keys (name:, target:, load:, ...)")
    used: set[str] = set()
    try:
        data = _expand_env(data, "", used)
    except _FieldError as e:
        raise UserError(f"{where}: {e}") from None
    try:
        scenario = Scenario.model_validate({**data, "source_path": source, "expanded_env": tuple(sorted(used))})
    except ValidationError as e:
        raise UserError(f"{where}: {_first_error(e)}") from None
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
