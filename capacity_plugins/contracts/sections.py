"""The registry both sides of a summary section share: the analysis (analysis/sections.py) and the
reports (outputs/sections.py) each keep one, of their own kind of section, under the same names."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class SectionRegistry(Generic[T]):
    """Sections by name, one instance each. `builtin` names the modules of `package` that register
    the built-in ones, in the order their effects apply; sections from elsewhere come after them,
    in the order they registered."""

    def __init__(self, what: str, package: str, builtin: tuple[str, ...]) -> None:
        self.what, self.package, self.builtin = what, package, builtin
        self._by_name: dict[str, T] = {}

    def register(self, name: str) -> Callable[[type[Any]], type[Any]]:
        def add(cls: type[Any]) -> type[Any]:
            if name in self._by_name:
                raise ValueError(f"{self.what} {name!r} is registered twice "
                                 f"({type(self._by_name[name]).__name__}, {cls.__name__})")
            cls.name = name
            self._by_name[name] = cls()
            return cls

        return add

    def registered(self) -> tuple[T, ...]:
        for module in self.builtin:  # each registers itself when first imported
            importlib.import_module(f"{self.package}.{module}")
        order = {f"{self.package}.{module}": i for i, module in enumerate(self.builtin)}
        return tuple(sorted(self._by_name.values(), key=lambda s: order.get(type(s).__module__, len(order))))
