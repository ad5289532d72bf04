"""`capacity matrix MATRIX.yaml`: one scenario against several server configurations, one table.

    capacity matrix scenarios/matrix-simulator.yaml
    capacity matrix m.yaml --output /tmp/matrices

For each entry of the matrix file (spec.py; docs/matrix.md): start its server or reconfigure it
(server.py), wait until it is ready, run the scenario against it with `capacity run --target-url`
and analyse the run with the entry's GPUs and GPU-hour price (entry.py), tear it down whatever
happened. Then the comparison (table.py) goes to `matrix.json`, `matrix.md` and `matrix.html`
(report.py) in `<output>/<name>-<timestamp>/`, beside one folder per entry.

Exit codes (docs/exit-codes.md): 0 every entry ran to a decision; 1 an entry failed (it did not
start, was not ready, its run failed or its analysis could not decide: its row says why, the
others still ran); 2 bad input — the matrix file, its scenario, the corpus, the output folder —
before anything is started or created; 130 / 143 interrupted (the current entry is torn down,
the table covers what ran). Imports the runner and the analysis, never Locust (tested).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.dialects import url_path_problem
from capacity_plugins.errors import EXIT_OK, EXIT_RUN_FAILED, CommandParser, UserError
from capacity_plugins.matrix.spec import Matrix, load_matrix

__all__ = ["build_parser", "load_matrix", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="capacity matrix",
                      description="Run one scenario against several server configurations and compare them.")
    p.add_argument("matrix", help="matrix YAML: the scenario and the entries (see scenarios/matrix-simulator.yaml)")
    p.add_argument("--output", help="parent folder of the matrix folder (default: the matrix file's `output`)")
    p.add_argument("--history", metavar="PATH|URL",
                   help="record each analysed entry in this catalog: a SQLite file, a postgresql:// URL or `off`, "
                        "labelled matrix=NAME, matrix_entry=ENTRY (default: $CAPACITY_HISTORY, else history.sqlite "
                        "beside the matrix folder; docs/history.md)")
    return p


def _checked(matrix: Matrix, output: str | None) -> tuple[Any, dict[str, str], Any]:
    """Everything that can be bad input, before anything starts: the scenario and what it needs."""
    from capacity_plugins.analysis.extra import ANALYSIS_INSTALL, missing_analysis_libs
    from capacity_plugins.runner.inputs import check_corpus, scenario_secrets, writable_parent
    from capacity_plugins.runner.preflight import target_headers
    from capacity_plugins.scenario import load_scenario

    if missing_analysis_libs():
        raise UserError(f"the matrix analyses every entry; it needs: {ANALYSIS_INSTALL}")
    scenario = load_scenario(matrix.scenario)
    if scenario.target.embedded:
        raise UserError(f"{matrix.path}: scenario: {matrix.scenario}: target.url is embedded; each entry "
                        "brings its own server, so the scenario needs a server URL (e.g. ${TARGET_URL:-http://127.0.0.1:8000})")
    if scenario.repeat != 1:
        raise UserError(f"{matrix.path}: scenario: {matrix.scenario}: repeat is {scenario.repeat}; "
                        "the matrix runs the scenario once per entry (set repeat: 1)")
    for i, entry in enumerate(matrix.entries):  # each runs as `capacity run --target-url`: same URL rule
        found = url_path_problem(entry.url, scenario.target.dialect)
        if found is not None:
            raise UserError(f"{matrix.path}: entries[{i}].url: {found}")
    writable_parent("--output" if output else f"{matrix.path}: output", Path(output or matrix.output))
    check_corpus(scenario)
    secrets = scenario_secrets(scenario)  # a secret too short to redact is bad input, as for capacity run
    return scenario, target_headers(scenario), secrets


def _scrub_logs(outcomes: list[Any], secrets: Any) -> None:
    """The servers' own output, with the scenario's secrets replaced by value (a server may log its key)."""
    for o in outcomes:
        for name in ("server.log", "teardown.log"):
            log = o.folder / name
            if log.is_file():
                text = log.read_text(encoding="utf-8", errors="replace")
                clean = secrets.scrub(text)
                if clean != text:
                    log.write_text(clean, encoding="utf-8")


def _on_sigterm(_signum: int, _frame: Any) -> None:
    from capacity_plugins.matrix.entry import Interrupted

    raise Interrupted(143)


def _not_run(entry: Any, root: Path, scenario: Any, why: str, status: str = "not run") -> Any:
    from capacity_plugins.matrix.entry import Outcome

    o = Outcome(entry, root / entry.name, entry.url,
                entry.gpus if entry.gpus is not None else scenario.capacity.gpus_per_node,
                entry.gpu_hour_usd if entry.gpu_hour_usd is not None else scenario.capacity.gpu_hour_usd)
    o.status, o.reason = status, why
    return o


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    matrix = load_matrix(args.matrix)
    scenario, headers, secrets = _checked(matrix, args.output)

    from capacity_plugins.contracts.folders import new_results_folder
    from capacity_plugins.history.catalog import recording_where
    from capacity_plugins.matrix import report
    from capacity_plugins.matrix.entry import Interrupted, Outcome, run_entry

    root = new_results_folder(args.output or matrix.output, matrix.name)
    root.mkdir(parents=True)
    history = recording_where(args.history, root.parent)
    shutil.copyfile(matrix.path, root / "matrix.yaml")
    started = time.time()
    print(f"[matrix] {len(matrix.entries)} entries, scenario {matrix.scenario} → {root}", flush=True)
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    outcomes: list[Outcome] = []
    stopped: int | None = None
    try:
        for i, entry in enumerate(matrix.entries, 1):
            if stopped is None:
                print(f"[matrix] entry {i}/{len(matrix.entries)}: {entry.name}", flush=True)
                try:
                    outcomes.append(run_entry(matrix, entry, scenario, headers, root, history))
                    stopped = outcomes[-1].interrupted
                    continue
                except (KeyboardInterrupt, Interrupted) as e:  # during its teardown: it was still torn down
                    stopped = e.code if isinstance(e, Interrupted) else 130
                    outcomes.append(_not_run(entry, root, scenario, "interrupted during its teardown", "interrupted"))
                    continue
            outcomes.append(_not_run(entry, root, scenario, "the matrix was interrupted before it"))
    finally:
        signal.signal(signal.SIGTERM, old)
    _scrub_logs(outcomes, secrets)
    # The scenario's secrets (API key, URL passwords) by value: a server's last log line may echo one.
    doc = secrets.scrub_obj(report.build(matrix, scenario.slo.model_dump(), outcomes, root, started))
    report.write(doc, root)
    sys.stdout.write("\n" + report.markdown(doc))
    print(f"[matrix] results: {root} (matrix.md, matrix.html, matrix.json)", flush=True)
    if stopped is not None:
        return stopped
    return EXIT_RUN_FAILED if doc["failed"] else EXIT_OK
