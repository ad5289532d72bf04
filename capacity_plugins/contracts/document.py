"""The base of the results documents' models (summary.json, meta.json): one rule for writing and reading them.

A `Section` is a pydantic model of one JSON object. Three rules hold for every one:

- **Sometimes-keys.** Some keys are written only in some cases (a closed-loop step has no
  `ttft_from_schedule_*`, a knee without a cross-check no `cross_checks`): a section lists them in
  `SOMETIMES`, and they are written only when the producer set them (or the file they were read
  from had them). Every other key is always written, `null` when unknown. So a document read and
  written again has the same keys, and a producer cannot drop a key by forgetting it.
- **Unknown keys are kept** (`extra="allow"`): a file written by a newer version reads, and its
  keys survive a rewrite. A freshly built document has none (tests/test_results_schema.py).
- **Strict JSON**: NaN and infinity are written as `null` (`dumps_json`): the files are read by
  other tools. In memory an unbounded interval end stays `inf` for the code that compares with it.

Nothing here imports numpy or pandas (contracts/__init__.py); numpy scalars a producer left in an
`Any` field are written as the Python numbers they hold.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from capacity_plugins.errors import UserError

# [low, high] at the summary's confidence; an end the data cannot support is null.
Interval = list[float | None]
# A number copied from an input as it was written there (an integer stays an integer).
Number = int | float


class Section(BaseModel):
    """One JSON object of a results document (module doc)."""

    # Attribute docstrings are the field descriptions docs/results-schema.md is generated from.
    model_config = ConfigDict(extra="allow", populate_by_name=True, use_attribute_docstrings=True)
    # Keys written only when set (module doc); every other field is always written.
    SOMETIMES: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_unset_sometimes(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.SOMETIMES - self.model_fields_set:
                field = type(self).model_fields[name]
                data.pop(field.serialization_alias or name, None)
                data.pop(name, None)
        return data

    def to_json(self) -> dict[str, Any]:
        """The object as it is written (keys as in the file; inf still inf: `dumps_json` nulls it)."""
        return self.model_dump(mode="python", by_alias=True)

    def dumps(self) -> str:
        return dumps_json(self.to_json())

    def save(self, path: Path) -> None:
        Path(path).write_text(self.dumps(), encoding="utf-8")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Self:
        """A parsed JSON document as this model; a bad one is one line naming `where` and the key."""
        try:
            return cls.model_validate(doc)
        except ValidationError as e:
            raise UserError(f"{where}: {_first_error(e)}") from None

    @classmethod
    def load(cls, path: Path) -> Self:
        path = Path(path)
        return cls.from_json(read_json(path), path.name)


def read_json(path: Path) -> Any:
    """A JSON file, or one line naming it (missing, unreadable, not JSON)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


def dumps_json(obj: Any) -> str:
    """JSON text with NaN/inf as null (summary.json is read by other tools)."""

    def clean(o: Any) -> Any:
        if isinstance(o, float):
            return None if not math.isfinite(o) else o
        if isinstance(o, BaseModel):
            return clean(o.model_dump(mode="python", by_alias=True))
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [clean(v) for v in o]
        if type(o).__module__ == "numpy" and hasattr(o, "item"):  # a numpy scalar, without importing numpy
            return clean(o.item())
        return o

    return json.dumps(clean(obj), indent=2, ensure_ascii=False)
