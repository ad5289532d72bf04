"""A capacity search's account in the summary (`search`): the bracket it found and why it stopped.

The search runs on the load side (kinds/capacity_search.py) and writes its account into meta.json;
the summary copies it unchanged. The capacity itself is still computed from the steps, as for any run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capacity_plugins.analysis.sections import AnalysisSection, section
from capacity_plugins.contracts.meta import Search

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.contracts.summary import StepSummary


@section("search")
class SearchSection(AnalysisSection):
    """A `capacity_search` run's account, from meta.json (None when it wrote none)."""

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Search | None:
        return run.meta.search
