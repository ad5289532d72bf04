"""The import contracts in pyproject.toml ([tool.importlinter]): layers, computing never rendering,
the commands never loading the load side, no Locust below the load, no import circle. `make lint` runs `lint-imports` too;
this test makes CI fail on a violation. The negative control runs the same contracts on a copy of
the package with deliberately bad modules added, so a configuration that no longer sees a
violation (a contract renamed away, a layer dropped) fails here as well.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers.paths import ROOT
from helpers.processes import LINT_IMPORTS, env_with, run

# What lint-imports prints per contract: "<name> KEPT" / "<name> BROKEN" (one line: wide console).
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}

CONTRACTS = {
    "layers": "Layers: each package imports only from the layers below it",
    "computing-never-renders": "Computing never imports rendering",
    "commands-never-load": "capacity run, matrix, analyze, compare never import the load side",
    "below-the-load-no-gevent": "The layers below the load never import Locust or gevent",
    "no-circles": "No import circle",
}


def lint_imports(cwd: Path) -> tuple[int, str]:
    r = run([*LINT_IMPORTS, "--no-cache"], cwd=cwd, env=env_with(**WIDE), timeout=120)
    return r.returncode, r.stdout + r.stderr


def verdicts(out: str) -> dict[str, str]:
    """Contract id → KEPT / BROKEN, from lint-imports' summary lines."""
    found = {}
    for key, name in CONTRACTS.items():
        line = next((ln for ln in out.splitlines() if ln.startswith(name) and ln.rstrip().endswith(("KEPT", "BROKEN"))),
                    None)
        assert line is not None, f"no verdict for {name!r} in:\n{out[-3000:]}"
        found[key] = line.rsplit(" ", 1)[-1]
    return found


def test_the_package_keeps_every_import_contract():
    code, out = lint_imports(ROOT)
    assert code == 0, out[-6000:]
    assert set(verdicts(out).values()) == {"KEPT"}, out[-3000:]


def test_the_contracts_catch_a_bad_import_and_a_circle(tmp_path):
    # The same pyproject.toml and package, plus one module that breaks each contract.
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    pkg = tmp_path / "capacity_plugins"
    shutil.copytree(ROOT / "capacity_plugins", pkg, ignore=shutil.ignore_patterns("__pycache__", "data"))
    bad = {
        # computing imports rendering (and a lower layer a higher one)
        "analysis/_renders.py": "from capacity_plugins.outputs import numbers\n",
        # the runner imports the load side
        "runner/_loads.py": "import gevent\nfrom capacity_plugins.client import pacer\n",
        # a layer below the load imports Locust
        "scenario/_locust.py": "import locust\n",
        # two siblings import each other
        "contracts/_ping.py": "from capacity_plugins.contracts import _pong\n",
        "contracts/_pong.py": "from capacity_plugins.contracts import _ping\n",
    }
    for rel, text in bad.items():
        (pkg / rel).write_text(text, encoding="utf-8")
    code, out = lint_imports(tmp_path)
    assert code != 0, out[-3000:]
    assert verdicts(out) == {key: "BROKEN" for key in CONTRACTS}, out[-6000:]
    assert "capacity_plugins.analysis._renders -> capacity_plugins.outputs.numbers" in out
    assert "capacity_plugins.runner._loads -> gevent" in out
    assert "capacity_plugins.scenario._locust -> locust" in out
