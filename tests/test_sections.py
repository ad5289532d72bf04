"""Summary sections (analysis/sections.py, outputs/sections.py): what a load kind, or a scenario feature
such as workload classes, adds to the analysis and the reports, registered by name.

The built-in sections are registered once on each side, the kinds that add one name a registered
section, and their effects apply in one order whatever imported them first; the pipeline and the
report renderers name no section (an AST check, with a negative control); and a kind registered
from outside the package, with its own analysis and report sections, comes out of `analyze` in
summary.json, summary.md, report.html and the headline with no product line changed.
"""

from __future__ import annotations

import ast
import json

import pytest
from helpers.analysis_data import make_results
from helpers.paths import ROOT
from helpers.processes import python

from capacity_plugins import kinds
from capacity_plugins.analysis import sections as analysis_sections
from capacity_plugins.analysis.pipeline import load_run, sweep_kind
from capacity_plugins.contracts.steps import STEP_KINDS
from capacity_plugins.contracts.summary import Summary
from capacity_plugins.outputs import sections as report_sections

PACKAGE = ROOT / "capacity_plugins"
BUILTIN = ["search", "workloads", "cache_probe", "trace", "item_rates", "reasoning", "images", "pareto", "agentic"]


def test_each_builtin_section_is_registered_on_both_sides_in_one_order_as_a_summary_field():
    assert [s.name for s in analysis_sections.registered()] == BUILTIN
    assert [s.name for s in report_sections.registered()] == BUILTIN
    assert set(BUILTIN) <= set(Summary.model_fields)
    # every kind that adds a section names a registered one; workload classes and items are no kind
    named = {k.summary_section for k in kinds.models() if k.summary_section}
    # a scenario feature, an API's kind, an answer's kind, a request's inputs, every sweep's view
    assert named == set(BUILTIN) - {"workloads", "item_rates", "reasoning", "images", "pareto"}
    assert analysis_sections.names() == tuple(BUILTIN)


def test_a_section_name_registers_once_on_each_side():
    with pytest.raises(ValueError, match="analysis section 'trace' is registered twice"):
        analysis_sections.section("trace")(type("Again", (analysis_sections.AnalysisSection,), {}))
    with pytest.raises(ValueError, match="report section 'trace' is registered twice"):
        report_sections.report_section("trace")(type("Again", (report_sections.ReportSection,), {}))


@pytest.mark.parametrize("name", [*kinds.names(), "rate", "concurrency", "wave"])
def test_a_run_without_steps_is_measured_in_what_its_kind_says(tmp_path, name):
    run = load_run(make_results(tmp_path, levels=[], rps=[], load={"kind": name}))
    kind = kinds.find(name)
    # a registered kind says it (LoadKind.sweep); a copy naming its load by its steps' kind keeps it
    expected = kind.sweep if kind is not None else name if name in STEP_KINDS else "concurrency"
    assert sweep_kind(run) == expected
    assert {n: kinds.get(n).sweep for n in kinds.names()} == {
        "concurrency_sweep": "concurrency", "rate_sweep": "rate", "peak": "peak", "capacity_search": "concurrency",
        "cache_probe": "concurrency", "trace": "trace", "agentic": "concurrency"}


# -- nothing names a section ------------------------------------------------------------------------------

# The modules that ask every section and must name none (the sections' own modules name theirs).
GENERIC = ["analysis/pipeline.py", "outputs/report.py", "outputs/report_text.py"]
SECTION_MODULES = {"search", "workloads", "cache_probe", "trace_windows", "search_text", "workloads_text",
                   "cache_probe_text", "trace_text"}


def section_names(source: str, where: str = "<source>") -> list[str]:
    """Every place in `source` that names a section: an attribute of that name (`summary.trace`), an
    import of a section's module or of a name from one, or a string that is a section's or a kind's name."""
    said = set(BUILTIN) | set(kinds.names())
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = None
        if isinstance(node, ast.Attribute) and node.attr in BUILTIN:
            hit = node.attr
        elif isinstance(node, ast.ImportFrom):
            modules = {(node.module or "").rsplit(".", 1)[-1], *(a.name for a in node.names)}
            hit = next(iter(sorted(modules & SECTION_MODULES)), None)
        elif isinstance(node, ast.Import):
            hit = next((a.name for a in node.names if a.name.rsplit(".", 1)[-1] in SECTION_MODULES), None)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in said:
            hit = repr(node.value)
        if hit is not None:
            found.append(f"{where}:{node.lineno}: {hit}")
    return found


def test_the_pipeline_and_the_report_renderers_name_no_section():
    found = [hit for rel in GENERIC for hit in section_names((PACKAGE / rel).read_text(encoding="utf-8"), rel)]
    assert found == [], "ask the registered sections (analysis/sections.py, outputs/sections.py):\n" + "\n".join(found)


def test_the_section_checker_sees_every_form_of_one():
    bad = ("from capacity_plugins.analysis.workloads import mix_capacity\n"
           "from capacity_plugins.outputs import cache_probe_text\n"
           "import capacity_plugins.outputs.trace_text\n"
           "def f(summary, run):\n"
           "    if summary.workloads: pass\n"
           "    x = summary.cache_probe.answer\n"
           "    if run.load_kind == 'rate_sweep': pass\n"
           "    return {'trace': 1}\n")
    assert len(section_names(bad)) == 7
    fine = "def f(summary):\n    return summary.capacity.notes + summary.steps\n"
    assert section_names(fine) == []


# -- a kind with its own sections, from outside -----------------------------------------------------------

_OUTSIDE = '''
import html, json
from pathlib import Path
from typing import ClassVar, Literal

# the built-in sections' effects apply in one order, whatever module was imported first
import capacity_plugins.outputs.cache_probe_text
import capacity_plugins.analysis.trace_windows

from capacity_plugins.contracts.document import Section
from capacity_plugins.kinds.base import LoadKind, StepPlan
from capacity_plugins.analysis.sections import AnalysisSection, registered, section
from capacity_plugins.outputs.sections import ReportSection, report_section
from capacity_plugins.outputs import sections as report_sections


@LoadKind.register("burst")
class BurstLoad(LoadKind):
    summary_section: ClassVar[str | None] = "bursts"
    kind: Literal["burst"] = "burst"
    users: int = 3

    def plan(self, scenario):
        return [StepPlan("concurrency", float(self.users), self.users, 100.0, 5.0, 1.0)]

    def open_loop(self, scenario):
        return False


class Bursts(Section):
    """What the burst kind adds to summary.json."""
    steps: int = 0
    peak_rps: float | None = None


@section("bursts")
class BurstAnalysis(AnalysisSection):
    def build(self, run, rows, sweep):
        return Bursts(steps=len(rows), peak_rps=max(r.rps or 0.0 for r in rows))

    def capacity(self, found, cap, run):
        cap.notes.append(f"bursts: {found.steps} measured")
        return cap

    def verdict(self, found, verdict):
        verdict.reasons.append(f"the bursts peaked at {found.peak_rps:.0f} req/s")

    def warnings(self, found, run):
        return ["bursts: a burst is not a sweep"]


@report_section("bursts")
class BurstReport(ReportSection):
    def headline(self, summary):
        return [f"Bursts: {summary.bursts.steps}"]

    def markdown(self, summary):
        return ["", "## Bursts", "", f"- peak {summary.bursts.peak_rps:.0f} req/s"]

    def html(self, summary):
        return f'<h2>Bursts</h2><p id="bursts">{html.escape(str(summary.bursts.steps))} bursts</p>'


from capacity_plugins import analyze
from capacity_plugins.contracts.summary import load_summary
from capacity_plugins.outputs.report import html_page
from capacity_plugins.outputs.report_text import headline

burst, plain = Path("BURST_DIR"), Path("PLAIN_DIR")
s = analyze(burst, formats=["json", "md"])
back = load_summary(burst / "summary.json")
other = analyze(plain, formats=["json", "md"])
print(json.dumps({
    "analysis_order": [x.name for x in registered()],
    "report_order": [x.name for x in report_sections.registered()],
    "json": json.loads((burst / "summary.json").read_text()),
    "md": (burst / "summary.md").read_text(),
    "html": html_page(s, {}),
    "headline": headline(s),
    "back": back.bursts,
    "other_json": json.loads((plain / "summary.json").read_text()),
    "other_md": (plain / "summary.md").read_text(),
    "other_html": html_page(other, {}),
}))
'''


def test_a_kind_registered_from_outside_adds_its_own_sections_to_the_analysis_and_the_reports(tmp_path):
    burst = make_results(tmp_path / "burst", levels=[1, 2, 4], rps=[5, 10, 20], load={"kind": "burst", "users": 3})
    plain = make_results(tmp_path / "plain", levels=[1, 2, 4], rps=[5, 10, 20])
    # a fresh interpreter: the kind and its sections are registered there only, as a plugin would
    r = python(_OUTSIDE.replace("BURST_DIR", str(burst)).replace("PLAIN_DIR", str(plain)), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["analysis_order"] == [*BUILTIN, "bursts"] and got["report_order"] == [*BUILTIN, "bursts"]
    doc = got["json"]
    # summary.json: its key at the top level, after the built-in keys, which are as they always were
    assert doc["bursts"] == {"steps": 3, "peak_rps": pytest.approx(20.0)}
    # item_rates: written only when set; the Pareto view is every sweep's
    assert list(doc)[-1] == "bursts" and all(doc.get(k) is None for k in BUILTIN if k != "pareto")
    assert got["back"] == doc["bursts"]  # read back: the plain JSON object
    # its effects, where the built-in sections' go
    assert "bursts: 3 measured" in doc["capacity"]["notes"]
    assert doc["verdict"]["reasons"][-1] == "the bursts peaked at 20 req/s"
    assert "bursts: a burst is not a sweep" in doc["warnings"]
    # the reports: its section after the run facts, its line after the capacity
    md = got["md"]
    assert md.index("## Run") < md.index("## Bursts\n\n- peak 20 req/s\n") < md.index("## Load table")
    head = got["headline"]
    assert head[[h.startswith("Capacity per node") for h in head].index(True) + 1] == "Bursts: 3"
    assert "- Bursts: 3\n" in md  # the details repeat the headline
    page = got["html"]
    assert page.index('id="facts"') < page.index('<h2>Bursts</h2><p id="bursts">3 bursts</p>') < \
        page.index("<h2>Throughput and latency against load</h2>")
    # a run of another kind has none of it
    other = got["other_json"]
    assert "bursts" not in other and not any("burst" in n for n in other["capacity"]["notes"] + other["warnings"])
    assert "Bursts" not in got["other_md"] and "Bursts" not in got["other_html"]
