"""Import boundaries between the package's layers, each checked in a fresh interpreter.

Inside pytest Locust is already imported (conftest.py), so `sys.modules` here proves nothing: every
check runs `python -c` in a new process, imports the module and every submodule under it, and
lists what got loaded. Each check also runs once on a module that does cross the boundary, so a
checker that can no longer see a bad import fails too.
"""

from __future__ import annotations

import json

import pytest
from helpers.processes import python

GEVENT_FREE = ["locust", "gevent"]  # what the Locust-free layers must never load
HEAVY = ["locust", "gevent", "pandas", "numpy", "scipy", "matplotlib", "pyarrow"]

# Imports `module`, then every submodule under it (not __main__: that one runs a program), and
# prints the loaded modules that are `forbidden` (a top-level name, or a dotted prefix).
_PROBE = """
import importlib, json, pkgutil, sys
module, forbidden, walk = {module!r}, {forbidden!r}, {walk!r}
root = importlib.import_module(module)
if walk and hasattr(root, "__path__"):
    for info in pkgutil.walk_packages(root.__path__, module + "."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules
                        if any(m == f or m.startswith(f + ".") for f in forbidden))))
"""


def loaded(module: str, forbidden: list[str], *, walk: bool = True) -> list[str]:
    """The modules among `forbidden` that importing `module` (and its submodules) loads."""
    r = python(_PROBE.format(module=module, forbidden=forbidden, walk=walk), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", [
    "capacity_plugins.analysis",
    "capacity_plugins.simulator",
    "capacity_plugins.dialects",
    "capacity_plugins.corpus",
    "capacity_plugins.contracts",
    "capacity_plugins.scenario",
    "capacity_plugins.kinds",
    "capacity_plugins.telemetry.maps",
])
def test_layers_below_the_load_never_import_locust_or_gevent(module):
    assert loaded(module, GEVENT_FREE) == []


LOAD_SIDE = ["capacity_plugins.client", "capacity_plugins.rehearsal", "capacity_plugins.swarm",
             "capacity_plugins.plugin"]


def test_the_runner_imports_neither_locust_gevent_nor_the_load_side():
    # `capacity run`'s parent process supervises the Locust child; it must not become one.
    assert loaded("capacity_plugins.runner", [*GEVENT_FREE, *LOAD_SIDE]) == []


def test_the_matrix_imports_neither_locust_gevent_nor_the_load_side():
    # `capacity matrix` starts servers and `capacity run`s; it never becomes a load generator itself.
    assert loaded("capacity_plugins.matrix", [*GEVENT_FREE, *LOAD_SIDE]) == []


def test_importing_the_package_alone_loads_nothing_heavy():
    # The public names are lazy (capacity_plugins.__getattr__): `capacity analyze` and the
    # supervisor pay for Locust or pandas only when they touch a name that needs it.
    assert loaded("capacity_plugins", HEAVY, walk=False) == []


def test_the_checker_sees_a_module_that_crosses_a_boundary():
    # The negative control: the load side imports Locust and gevent, and the probe says so.
    assert {"locust", "gevent"} <= set(loaded("capacity_plugins.client.users", GEVENT_FREE, walk=False))
    assert "capacity_plugins.client" in loaded("capacity_plugins.client.users", LOAD_SIDE, walk=False)
    touched = python("import sys, capacity_plugins; capacity_plugins.LLMUser; print('locust' in sys.modules)")
    assert touched.returncode == 0 and touched.stdout.strip() == "True", touched.stderr[-2000:]


def test_simulator_dialect_modules_do_not_import_the_app():
    # Inside the simulator the dependency runs one way (app -> dialect APIs -> protocol): a dialect
    # module imported on its own must not pull in the app, and the names that used to live in app
    # are still there.
    code = ("import sys\n"
            "import capacity_plugins.simulator.openai_api, capacity_plugins.simulator.tgi_api\n"
            "import capacity_plugins.simulator.ollama_api\n"
            "assert 'capacity_plugins.simulator.app' not in sys.modules, 'a dialect imported app'\n"
            "from capacity_plugins.simulator.app import BadRequest, Dialect, Job, Params, SimulatorApp\n"
            "from capacity_plugins.simulator import protocol\n"
            "assert BadRequest is protocol.BadRequest and Dialect is protocol.Dialect\n"
            "assert Params is protocol.Params\n")
    r = python(code, timeout=60)
    assert r.returncode == 0, r.stderr
