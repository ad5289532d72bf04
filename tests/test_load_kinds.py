"""Load kinds (capacity_plugins/kinds/): one module each, registered by name, the only dispatch.

The registry holds every built-in kind once under the name its `kind:` literal holds; an unknown
name is one line that names the closest kind; nothing in the package asks `isinstance` of a load
kind (an AST check, with a negative control); and a kind registered from outside the package runs
through the scenario, its errors and the rehearsal's plan with no other line changed.
"""

from __future__ import annotations

import ast
import json
import typing

import pytest
from helpers.paths import ROOT
from helpers.processes import python
from helpers.scenarios import scenario_error

from capacity_plugins import kinds
from capacity_plugins.errors import UserError
from capacity_plugins.kinds import LoadKind
from capacity_plugins.kinds.peak import PeakLoad
from capacity_plugins.scenario import Scenario

PACKAGE = ROOT / "capacity_plugins"


def test_every_builtin_kind_is_registered_once_under_its_module_and_literal_name():
    registered = LoadKind.registered()
    assert tuple(registered) == kinds.BUILTIN == kinds.names()
    for name, model in registered.items():
        assert model.__module__ == f"capacity_plugins.kinds.{name}"
        assert model.model_fields["kind"].default == name
    assert len(set(registered.values())) == len(registered)
    # the scenario's `load:` union is exactly the registry, in its order
    assert typing.get_args(Scenario.model_fields["load"].annotation) == kinds.models()
    assert type(Scenario.model_validate({"target": {"url": "embedded"}}).load) is registered[kinds.DEFAULT]


def test_a_name_registers_once_and_must_be_the_kinds_literal():
    with pytest.raises(ValueError, match="load kind 'peak' is registered twice"):
        LoadKind.register("peak")(PeakLoad)
    with pytest.raises(TypeError, match="needs kind: Literal\\['surge'\\]"):
        LoadKind.register("surge")(PeakLoad)
    assert LoadKind.registered()["peak"] is PeakLoad and "surge" not in LoadKind.registered()


def test_an_unknown_kind_names_the_closest_one(tmp_path):
    assert kinds.get("trace").__name__ == "TraceLoad"
    with pytest.raises(UserError) as e:
        kinds.get("peek")
    assert str(e.value) == ("load: kind must be one of concurrency_sweep, rate_sweep, peak, capacity_search, "
                            "cache_probe, trace, agentic (did you mean peak?)")
    # the scenario says the same, on the file's line
    msg = scenario_error(tmp_path, "target: {url: embedded}\nload: {kind: cache_prob}\n")
    assert msg.endswith("s.yaml: load: kind must be one of concurrency_sweep, rate_sweep, peak, capacity_search, "
                        "cache_probe, trace, agentic (did you mean cache_probe?)")
    # a name close to nothing gets no guess (the message the scenario always gave)
    assert kinds.unknown("wave") == ("kind must be one of concurrency_sweep, rate_sweep, peak, capacity_search, "
                                     "cache_probe, trace, agentic")


# -- no isinstance on a load kind ---------------------------------------------------------------------------


def _kind_names() -> set[str]:
    """The classes a dispatch on the load kind would name: every kind's model and their bases."""
    out = {"LoadKind", "OpenLoop", "LoadConfig"}
    for model in kinds.models():
        out |= {c.__name__ for c in model.__mro__ if issubclass(c, LoadKind)}
    return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def kind_dispatches(source: str, where: str = "<source>") -> list[str]:
    """Every `isinstance` / `issubclass` / `type(x) is` in `source` that asks about a load kind's class."""
    names = _kind_names()
    found = []
    for node in ast.walk(ast.parse(source)):
        asked: ast.AST | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            asked = node.args[1]
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                and isinstance(node.left.func, ast.Name) and node.left.func.id == "type":
            asked = ast.Tuple(elts=list(node.comparators))
        if asked is not None and _names_in(asked) & names:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_in_the_package_dispatches_on_a_load_kind_with_isinstance():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             for hit in kind_dispatches(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert found == [], "ask the load kind (a hook on LoadKind), not isinstance:\n" + "\n".join(found)


def test_the_dispatch_checker_sees_every_form_of_one():
    # The negative control: each of these is a dispatch on the kind the checker must report.
    bad = ("from capacity_plugins import scenario\n"
           "def f(load):\n"
           "    if isinstance(load, TraceLoad): pass\n"
           "    if isinstance(load, CapacitySearchLoad | CacheProbeLoad): pass\n"
           "    if isinstance(load, (PeakLoad, RateSweepLoad)): pass\n"
           "    if not isinstance(load, scenario.ConcurrencySweepLoad): pass\n"
           "    if type(load) is OpenLoop: pass\n"
           "    if issubclass(type(load), LoadKind): pass\n")
    assert len(kind_dispatches(bad)) == 6
    # ... and leaves alone what asks about other things
    fine = "def f(data, step):\n    return isinstance(data, dict) and isinstance(step.level, int | float)\n"
    assert kind_dispatches(fine) == []


# -- a new kind is one module -------------------------------------------------------------------------------

_NEW_KIND = '''
import json
from typing import Literal
from capacity_plugins.kinds.base import LoadKind, StepPlan

@LoadKind.register("burst")
class BurstLoad(LoadKind):
    kind: Literal["burst"] = "burst"
    users: int = 3
    bursts: int = 2

    def plan(self, scenario):
        return [StepPlan("concurrency", float(self.users), self.users, 100.0, 5.0, 1.0) for _ in range(self.bursts)]

    def open_loop(self, scenario):
        return False

from capacity_plugins.errors import UserError
from capacity_plugins.rehearsal.shapes import plan_steps
from capacity_plugins.scenario import parse_scenario

s = parse_scenario({"target": {"url": "embedded"}, "load": {"kind": "burst", "bursts": 3}}, "s.yaml")
plans = plan_steps(s)
try:
    parse_scenario({"target": {"url": "embedded"}, "load": {"kind": "burst", "burts": 3}}, "s.yaml")
except UserError as e:
    typo = str(e)
try:
    parse_scenario({"target": {"url": "embedded"}, "load": {"kind": "bursty"}}, "s.yaml")
except UserError as e:
    unknown = str(e)
print(json.dumps({"levels": [p.level for p in plans], "min_requests": plans[0].min_requests,
                  "open_loop": s.open_loop, "copy": s.resolved_dict()["load"], "typo": typo, "unknown": unknown}))
'''


def test_a_kind_registered_from_outside_runs_through_scenario_errors_and_plan():
    # Registered before the scenario is first imported (a fresh interpreter): no other line changes.
    r = python(_NEW_KIND, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["levels"] == [3.0, 3.0, 3.0] and got["min_requests"] == 100 and got["open_loop"] is False
    assert got["copy"]["kind"] == "burst" and got["copy"]["bursts"] == 3
    assert got["typo"] == "s.yaml: load.burts: unknown key for load kind burst (did you mean bursts?)"
    assert got["unknown"].endswith("cache_probe, trace, agentic, burst (did you mean burst?)")


def test_kind_modules_import_neither_locust_nor_the_load_side():
    # The runner and the analysis read scenarios, and so every kind, in plain processes.
    code = ("import json, sys, capacity_plugins.kinds\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent', 'pandas')"
            " or m.startswith(('capacity_plugins.rehearsal', 'capacity_plugins.client', 'capacity_plugins.analysis')))))")
    r = python(code, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


def test_each_kind_module_is_named_in_the_package_table():
    # capacity_plugins/kinds/__init__.py's table is where a reader finds a kind's module.
    table = (PACKAGE / "kinds" / "__init__.py").read_text(encoding="utf-8")
    for name in kinds.names():
        assert f"| `{name}` | `{name}.py` |" in table
    assert {p.stem for p in (PACKAGE / "kinds").glob("*.py")} - {"__init__", "base"} == set(kinds.names())
