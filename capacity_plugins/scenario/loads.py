"""The scenario's `load` section: one model per registered load kind (capacity_plugins/kinds/).

`kind` picks the model; a section without it is the default kind (`kinds.DEFAULT`). The union is
built from the registry, so a new kind needs no line here.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from capacity_plugins import kinds

if TYPE_CHECKING:
    LoadConfig = kinds.LoadKind
else:
    LoadConfig = Annotated[reduce(operator.or_, kinds.models()), Field(discriminator="kind")]
