"""capacity-plugins: Locust plugins that turn an LLM inference load test into a capacity decision.

Data flows one way (docs/architecture.md): corpus → dialects → load (users, shapes, arrivals,
steps) → sinks (records, live stats) → results folder (+ telemetry) → analysis → report and
verdict. The contracts between the stages live in `capacity_plugins.contracts`.

The public names below are imported lazily: `import capacity_plugins` (and so `capacity analyze`,
`capacity run`'s parent process) never loads Locust or gevent; touching `LLMUser` or `install`
does, as it must (Locust patches the standard library when imported).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name → the module that defines it
_EXPORTS: dict[str, str] = {
    "LLMUser": "capacity_plugins.client.users",
    "LLMRequestError": "capacity_plugins.client.users",
    "install": "capacity_plugins.plugin",
    "register": "capacity_plugins.plugin",
    "CapacityEvents": "capacity_plugins.client.events",
    "LLMOptions": "capacity_plugins.contracts.options",
    "RequestRecord": "capacity_plugins.contracts.records",
    "StepRow": "capacity_plugins.contracts.steps",
    "Scenario": "capacity_plugins.scenario",
    "load_scenario": "capacity_plugins.scenario",
    "load_corpus": "capacity_plugins.corpus",
    "analyze": "capacity_plugins.outputs",
}

__all__ = [
    "CapacityEvents",
    "LLMOptions",
    "LLMRequestError",
    "LLMUser",
    "RequestRecord",
    "Scenario",
    "StepRow",
    "__version__",
    "analyze",
    "install",
    "load_corpus",
    "load_scenario",
    "register",
]

if TYPE_CHECKING:
    from capacity_plugins.client.events import CapacityEvents
    from capacity_plugins.client.users import LLMRequestError, LLMUser
    from capacity_plugins.contracts.options import LLMOptions
    from capacity_plugins.contracts.records import RequestRecord
    from capacity_plugins.contracts.steps import StepRow
    from capacity_plugins.corpus import load_corpus
    from capacity_plugins.outputs import analyze
    from capacity_plugins.plugin import install, register
    from capacity_plugins.scenario import Scenario, load_scenario


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'capacity_plugins' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
