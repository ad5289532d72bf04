"""The sections of the summary that only some runs have, registered by name: what each adds to the analysis.

A section is one key of summary.json — a capacity search's account (`search`), workload classes
(`workloads`), a cache probe's comparison of its arms (`cache_probe`), a trace replay's windows
(`trace`) — computed by its own module, which registers it here:

    @section("trace")
    class TraceSection(AnalysisSection):
        def build(self, run, rows, sweep):
            return trace_summary(rows, run.settings.load, run.slo, run.requests)

        def verdict(self, found, verdict):
            verdict.reasons.insert(0, found.line)

The pipeline (pipeline.py) asks every registered section the same questions, in order, and names
none of them. The hooks, each a no-op unless the section has something to add:

| hook | when | what it does |
|---|---|---|
| `applies(run)` | first | whether the run has the section: by default when the run's load kind names it (`LoadKind.summary_section`, capacity_plugins/kinds/); workload classes when the scenario has `workloads:` |
| `step_records(run)` | before the walk over the records | what the section reads of each step's records on the analysis's one walk over them (a step consumer, step_records.py), or None; what it gathered is `run.gathered[name]` |
| `rows(run, rows)` | before each step's one-line conclusion | changes the step rows (workload classes: each class judged by its own SLO, the step's SLO fields the mix's) |
| `build(run, rows, sweep)` | once the rows are final | the section's model, summary.json's key `name`; None: the run has none after all |
| `capacity(found, cap, run)` | after the capacity under the SLO, before the plan | the capacity the plan and the verdict use (workload classes: the mix's), or a note on it (a cache probe) |
| `verdict(found, verdict)` | after the verdict | its effect on the verdict (a trace replay: where in the traffic it broke comes first) |
| `warnings(found, run)` | with the run's warnings, before "no telemetry" | the section's own warnings |

`found` is what `build` returned. The effects apply in the order of `BUILTIN`, then in the order
other sections registered: the workload classes' capacity first, a cache probe's note on it after.

A built-in section fills a typed field of `Summary` (contracts/summary.py, documented in
docs/results-schema.md). One registered from outside the package writes its key at summary.json's
top level as any other unknown key (the model keeps them; read back, it is the plain JSON object).
Its words in the reports are a report section of the same name (outputs/sections.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from capacity_plugins import kinds
from capacity_plugins.contracts.sections import SectionRegistry

if TYPE_CHECKING:
    from capacity_plugins.analysis.load import RunData
    from capacity_plugins.analysis.step_records import StepConsumer
    from capacity_plugins.contracts.summary import Capacity, StepSummary, Verdict

# The built-in sections, by the module that registers each, in the order their effects apply.
BUILTIN = ("search", "workloads", "cache_probe", "trace_windows", "items", "reasoning", "images", "pareto",
           "agentic")


class AnalysisSection:
    """One section of the summary: its name and what it adds to the analysis (module doc)."""

    name: ClassVar[str] = ""  # the summary.json key it fills (set by @section)

    def applies(self, run: RunData) -> bool:
        """Whether the run has this section: the run's load kind names it (`LoadKind.summary_section`)."""
        kind = kinds.find(run.load_kind)
        return kind is not None and kind.summary_section == self.name

    def step_records(self, run: RunData) -> StepConsumer | None:
        """A consumer of each step's records on the analysis's walk (`run.gathered[name]` after it)."""
        return None

    def rows(self, run: RunData, rows: list[StepSummary]) -> None:
        """Change the step rows before each is concluded (in place)."""
        return None

    def build(self, run: RunData, rows: list[StepSummary], sweep: str) -> Any:
        """The section's model (the value of summary.json's key `name`), or None."""
        raise NotImplementedError

    def capacity(self, found: Any, cap: Capacity, run: RunData) -> Capacity:
        """The capacity under the SLO the plan and the verdict use."""
        return cap

    def verdict(self, found: Any, verdict: Verdict) -> None:
        """The section's effect on the verdict (in place)."""
        return None

    def warnings(self, found: Any, run: RunData) -> list[str]:
        """What the reader must know of this section."""
        return []


_SECTIONS: SectionRegistry[AnalysisSection] = SectionRegistry("analysis section", __package__ or "", BUILTIN)
S = TypeVar("S", bound=AnalysisSection)


def section(name: str) -> Callable[[type[S]], type[S]]:
    """`@section("trace")` on an AnalysisSection subclass: the analysis builds summary.json's `trace` with it."""
    return _SECTIONS.register(name)


def registered() -> tuple[AnalysisSection, ...]:
    """Every section: the built-in ones in `BUILTIN`'s order, then the others in the order they registered."""
    return _SECTIONS.registered()


def names() -> tuple[str, ...]:
    return tuple(s.name for s in registered())
