"""The results folder of the running test: which one, switching it, and the files written beside the records.

One owner per writing process (local runner or master). It names the folder by the one rule in
`contracts.folders` (the scenario's `output/<name>-<stamp>`, or `results/run-<stamp>` without a
scenario; an explicit `--results-dir` that already holds records is refused), switches to a fresh
folder when the web UI starts another test (each UI test is its own run, analysed on its own),
and writes what is not the records: `scenario.yaml` (the scenario as run, secrets scrubbed),
`meta.json` and `llm_stats.csv`. Everything it writes goes through the run's `Secrets` scrub.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capacity_plugins.contracts.folders import DEFAULT_NAME, DEFAULT_PARENT, check_unused, new_results_folder
from capacity_plugins.contracts.meta import META_FILE, Meta

if TYPE_CHECKING:
    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.client.events import CapacityEvents
    from capacity_plugins.scenario import Scenario

log = logging.getLogger(__name__)

ANALYSIS_TIMEOUT_S = 600


def choose_folder(explicit: Path | None, scenario: Scenario | None) -> Path:
    """The folder a new run writes to (UserError when an explicit one already holds records)."""
    if explicit is not None:
        check_unused(explicit)
        return explicit
    if scenario is not None:
        return new_results_folder(scenario.output, scenario.name)
    return new_results_folder(DEFAULT_PARENT, DEFAULT_NAME)


class ResultsFolder:
    def __init__(self, path: Path, scenario: Scenario | None, client: LLMClient, events: CapacityEvents,
                 parsed_options: Any) -> None:
        self.path = path  # the running test's folder
        self.scenario = scenario  # the rehearsal it runs (its copy goes into the folder); None: plain Locust
        self.client = client  # its records sink moves along; its secrets are scrubbed from every file; its stats
        self.events = events  # results_switched: the authority restarts its telemetry in the new folder
        self.parsed = parsed_options

    def switch(self) -> Path:
        """A fresh folder next to the current one, for the next test of a web UI session."""
        scenario = self.scenario
        parent, name = (Path(scenario.output), scenario.name) if scenario else (self.path.parent, DEFAULT_NAME)
        folder = new_results_folder(parent, name)
        folder.mkdir(parents=True, exist_ok=True)
        if self.parsed is not None:
            self.parsed.results_dir = str(folder)  # the web UI form's next test reads it back
        if self.client.records is not None:
            self.client.records.rotate(folder)
        self.path = folder
        self.write_scenario_copy()
        self.events.results_switched.fire(folder=folder)
        print(f"[capacity] new test: results → {folder}", flush=True)
        return folder

    # -- the files beside the records ------------------------------------------------------------

    def write_scenario_copy(self) -> None:
        scenario = self.scenario
        if scenario is None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            loaded = self.client.target_url
            if loaded and not scenario.target.embedded and loaded != scenario.target.url:
                # `capacity run --target-url` (or --host): the copy names the server actually loaded
                scenario = scenario.model_copy(update={"target": scenario.target.model_copy(update={"url": loaded})})
            text = self.client.secrets.scrub(scenario.resolved_yaml(redact=True))
            (self.path / "scenario.yaml").write_text(text, encoding="utf-8")
        except Exception:
            log.exception("writing the scenario copy failed")

    def write_meta(self, meta: Meta) -> None:
        try:
            # the run's secrets by value, wherever they got in (a server's answer, an option)
            Meta.model_validate(self.client.secrets.scrub_obj(meta.to_json())).write(self.path / META_FILE)
        except Exception:
            log.exception("writing meta.json failed")

    def write_llm_stats(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.client.stats.write_csv(self.path / "llm_stats.csv")
        except Exception:
            log.exception("writing llm_stats.csv failed")


def analyse_in_background(folder: Path) -> None:
    """`capacity analyze FOLDER` in a child process: pandas/matplotlib stay out of the Locust hub.

    Then the terminal gets what `capacity run` ends with headless: the plain answer, its reasons in
    words and the report (`--format answer` prints exactly those; the wording is the analysis's)."""
    try:
        r = subprocess.run([sys.executable, "-m", "capacity_plugins", "analyze", str(folder), "--format", "answer"],
                           capture_output=True, text=True, timeout=ANALYSIS_TIMEOUT_S)
        if r.returncode in (0, 1):
            if r.returncode == 0:
                print(f"[capacity] analysed: {folder / 'report.html'}", flush=True)
            else:  # analysed, but the data could not support a decision (the report says why)
                lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
                why = lines[-1].removeprefix("capacity analyze: ").strip() if lines else "see the report"
                print(f"[capacity] analysed, no decision: {folder / 'report.html'} ({why})", flush=True)
            out = [ln for ln in r.stdout.splitlines() if ln.strip()]
            for i, line in enumerate(out):
                print(f"[capacity] {'answer: ' if i == 0 else ''}{line}", flush=True)
        else:
            print(f"[capacity] analysis of {folder} failed: {r.stderr.strip()[-300:]}", flush=True)
    except Exception as e:  # never let the analysis take the UI down
        print(f"[capacity] analysis of {folder} failed: {e}", flush=True)
