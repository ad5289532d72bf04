"""The run catalog, the gate's rule and the files that come with them, without a run.

- the gate's decision from `capacity compare`'s rows: not worse / worse / cannot decide and the
  repeats that would decide, on rows built by hand (on repeat sets: tests/test_history.py; the CI
  examples' commands: tests/test_history_ci.py);
- the SQLite catalog: migrations applied once, a newer schema refused, a folder recorded again
  replaced, labels filtered; bad catalogs and bad flags are one line and a non-zero exit;
- scenario `labels:`; the Grafana dashboard through Grafana's model; the CI examples against the
  published schemas (SchemaStore's, vendored by check-jsonschema) and docs/ci.md showing them as they are.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import sqlite3

import jsonschema
import pytest
import yaml
from helpers.analysis_data import make_results
from helpers.json_diff import not_kept
from helpers.paths import ROOT
from helpers.ports import free_port

from capacity_plugins.cli import main
from capacity_plugins.contracts.comparison import CompareRow
from capacity_plugins.contracts.history import RunEntry, StepEntry
from capacity_plugins.errors import UserError
from capacity_plugins.history import schema
from capacity_plugins.history.catalog import Catalog
from capacity_plugins.history.gate import _check
from capacity_plugins.scenario.model import parse_labels

CI_FILES = {"github-actions.yml": "github-workflows", "gitlab-ci.yml": "gitlab-ci"}


def _row(metric: str, before: float, after: float, noise: float) -> CompareRow:
    return CompareRow(metric=metric, before=before, after=after, change=after / before - 1, noise=noise)


CAP = "capacity per node under SLO (rps)"


@pytest.mark.cpu
def test_the_gate_rule_on_compares_intervals():
    # capacity 100 → 97 ± 4: the worst loss the interval allows is 7 % < 10 %: not worse
    ok = _check(_row(CAP, 100, 97, 4), "capacity", 0.10, 3, True, 8)
    assert ok.decision == "not worse" and ok.loss_upper == pytest.approx(0.07)
    assert ok.change_ci == pytest.approx([-0.07, 0.01])
    # 100 → 60 ± 10: even the smallest loss (30 %) is beyond the margin: worse, said with the interval
    bad = _check(_row(CAP, 100, 60, 10), "capacity", 0.10, 3, True, 8)
    assert bad.decision == "worse" and bad.text == "capacity −40 % [−50, −30]: worse beyond the 10% margin"
    # 100 → 95 ± 10 between repeat sets of 3: the interval [−15, +5] straddles −10 %;
    # noise/gap = 0.10/0.05: 3 × 2² = 12 repeats per side would decide
    unsure = _check(_row(CAP, 100, 95, 10), "capacity", 0.10, 3, True, 8)
    assert unsure.decision == "cannot decide" and unsure.repeats_needed == 12
    assert "about 12 repeats per side would decide" in unsure.text
    # the same between single runs: their noise holds the 10 % allowance only repeat sets replace
    single = _check(_row(CAP, 100, 95, 10), "capacity", 0.10, 1, False, 8)
    assert single.decision == "cannot decide" and "repeat sets of at least 3 on each side" in single.text
    # a latency is worse when it rises: 200 → 300 ms ± 20 at level 8
    slow = _check(_row("E2E P99 ms", 200, 300, 20), "E2E P99", 0.10, 3, True, 8)
    assert slow.decision == "worse" and slow.text.startswith("E2E P99 at level 8 +50 % [+40, +60]")
    # nothing to judge: cannot decide, and why
    gone = _check(CompareRow(metric="TTFT P95 ms", before=None, after=None), "TTFT P95", 0.10, 3, True, None)
    assert gone.decision == "cannot decide" and "no level both measured validly below saturation" in gone.text


def _entry(folder: str, build: str, cap: float) -> RunEntry:
    return RunEntry(results_dir=folder, scenario="s", labels={"build": build}, capacity_rps=cap, capacity_lo=cap - 1,
                    capacity_hi=cap + 1, started_unix=1.0, steps=[StepEntry(step=0, level=4, rps=cap, valid=True)])


@pytest.mark.cpu
def test_the_sqlite_catalog_migrates_once_records_and_filters(tmp_path, capsys):
    where = str(tmp_path / "h.sqlite")
    with Catalog(where) as c:
        assert c.schema_version() == schema.LATEST
        first = c.record(_entry("/r/1", "a", 10.0), "{}")
        c.bless("release", first)
        c.record(_entry("/r/2", "b", 7.0), "{}")
        # analysed again (capacity analyze records too): updated in place, not doubled, and the
        # baseline blessed on it stays (a delete and insert cascaded to the baseline and lost it)
        again = c.record(_entry("/r/1", "c", 11.0), "{}")
    # the text listing: each column as wide as its widest cell, the labels included
    capsys.readouterr()
    assert main(["history", "list", "--history", where, "--label", "build=c"]) == 0
    header, row, count = capsys.readouterr().out.splitlines()
    assert header.index("results") == row.index("/r/1") and header.index("capacity") == row.index("11 rps")
    assert "build=c" in row and count == f"1 runs in {where}"
    with Catalog(where) as c:  # reopened: nothing migrates twice
        assert [r.capacity_rps for r in c.runs()] == [11.0, 7.0] and again == first
        assert [r.results_dir for r in c.runs(labels={"build": "c"})] == ["/r/1"]
        assert c.runs(labels={"build": "a"}) == []  # its labels replaced, not added to
        found = c.find("release")
        assert found is not None and found.id == again and found.capacity_rps == 11.0
        assert [s.step for s in found.steps] == [0] and found.steps[0].valid is True
        assert c.baselines()[0][:2] == ("release", again)
        # a repeat's folder analysed on its own keeps the set it was recorded in
        parent = c.record(_entry("/r/set", "a", 9.0).model_copy(update={"kind": "repeat_set"}), "{}")
        child = c.record(_entry("/r/set/r1", "a", 9.0).model_copy(update={"parent_id": parent}), "{}")
        assert c.record(_entry("/r/set/r1", "a", 9.5), "{}") == child
        assert [r.results_dir for r in c.runs(top_level=True)] == ["/r/1", "/r/2", "/r/set"]
    db = sqlite3.connect(where)
    assert db.execute("SELECT count(*) FROM schema_migrations").fetchone() == (len(schema.MIGRATIONS),)
    db.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', 0)")
    db.commit()
    db.close()
    with pytest.raises(UserError, match=r"schema version 99 is newer than this capacity-plugins knows \(1\)"):
        Catalog(where)


@pytest.mark.cpu
def test_bad_catalogs_are_one_line(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database, just text " * 100)
    with pytest.raises(UserError, match="junk.sqlite: not a catalog"):
        Catalog(str(junk))
    with pytest.raises(UserError, match="a folder, not a catalog file"):
        Catalog(str(tmp_path))
    with pytest.raises(UserError, match="no such folder"):
        Catalog(str(tmp_path / "nowhere" / "h.sqlite"))
    with pytest.raises(UserError, match=r"--label 'build': expected KEY=VALUE"):
        parse_labels(["build"])
    assert parse_labels(["build=42", "sha=a=b"]) == {"build": "42", "sha": "a=b"}


def _refused(capsys, *argv: str) -> str:
    """`capacity ARGV` (its main, in this process: each is refused before anything starts): exit 2,
    one line on stderr, no traceback; the line."""
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


def test_commands_refuse_bad_input_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CAPACITY_HISTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./results/history.sqlite to fall back on
    assert "no catalog: give --history" in _refused(capsys, "history", "list")
    url = f"postgresql://capacity:s3cret-pass@127.0.0.1:{free_port()}/history"
    line = _refused(capsys, "history", "list", "--history", url)
    assert "cannot connect" in line and "s3cret-pass" not in line
    h = str(tmp_path / "h.sqlite")
    assert "--baseline release: not a folder, and no such baseline" in \
        _refused(capsys, "gate", "--baseline", "release", str(tmp_path), "--history", h)
    assert "--margin: expected a share in [0, 1)" in \
        _refused(capsys, "gate", "--baseline", str(tmp_path), str(tmp_path), "--margin", "1.5")
    assert "not a results folder" in _refused(capsys, "history", "add", str(tmp_path / "missing"), "--history", h)
    assert "--label 'no value': expected KEY=VALUE" in \
        _refused(capsys, "run", str(ROOT / "scenarios/quickstart.yaml"), "--label", "no value", "--output", str(tmp_path))
    assert not list(tmp_path.glob("quickstart-*"))  # refused before any folder


def _listed(capsys, *where: str) -> list[str]:
    capsys.readouterr()
    assert main(["history", "list", "--format", "json", *where]) == 0
    return [e["results_dir"] for e in json.loads(capsys.readouterr().out)]


@pytest.mark.cpu
def test_every_analysed_folder_is_recorded_beside_it_unless_off(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CAPACITY_HISTORY", raising=False)
    results = tmp_path / "results"
    runs = [make_results(results / f"run-{i}", levels=[1, 2, 4], rps=[1.0, 2.0, 3.9]) for i in range(3)]
    assert main(["analyze", str(runs[0]), "--no-report"]) == 0
    said = capsys.readouterr().err
    assert f"capacity analyze: history: recorded as run 1 in {results / 'history.sqlite'}" in said, said
    # analysed again: its entry replaced, not doubled; a what-if (--out) leaves the run's record alone
    assert main(["analyze", str(runs[0]), "--no-report", "--quiet"]) == 0
    assert "history" not in capsys.readouterr().err
    assert main(["analyze", str(runs[1]), "--no-report", "--out", str(tmp_path / "what-if")]) == 0
    monkeypatch.setenv("CAPACITY_HISTORY", "off")
    assert main(["analyze", str(runs[2]), "--no-report"]) == 0
    assert "history" not in capsys.readouterr().err
    # the commands that read a catalog find ./results/history.sqlite when none is named
    monkeypatch.delenv("CAPACITY_HISTORY")
    monkeypatch.chdir(tmp_path)
    assert _listed(capsys) == [str(runs[0].resolve())]
    # one that cannot be written: one line, the analysis's exit code stays
    monkeypatch.setenv("CAPACITY_HISTORY", str(tmp_path / "missing" / "h.sqlite"))
    assert main(["analyze", str(runs[2]), "--no-report"]) == 0
    [line] = [ln for ln in capsys.readouterr().err.splitlines() if "history" in ln]
    assert "not recorded" in line and f"later: capacity history add {runs[2]}" in line, line
    monkeypatch.setenv("CAPACITY_HISTORY", "off")
    assert "history is 'off'" in _refused(capsys, "history", "list")


@pytest.mark.cpu
def test_scenario_labels_are_text(tmp_path):
    from capacity_plugins.scenario import load_scenario

    f = tmp_path / "s.yaml"
    f.write_text("target: {url: embedded}\nlabels: {build: 42, canary: true, sha: abc}\n")
    assert load_scenario(f).labels == {"build": "42", "canary": "true", "sha": "abc"}
    f.write_text("target: {url: embedded}\nlabels: {'bad key': x}\n")
    with pytest.raises(UserError, match="labels: label 'bad key'"):
        load_scenario(f)


@pytest.mark.cpu
def test_history_dashboard_round_trips_through_grafanas_model():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    original = json.loads((ROOT / "deploy/grafana/history-dashboard.json").read_text())
    model = Dashboard.from_json(original)
    lost = not_kept(original, json.loads(json.dumps(model, cls=JSONEncoder)))
    assert not lost, f"keys Grafana's dashboard model does not know or changes: {lost[:20]}"
    ids = [p["id"] for p in original["panels"]]
    assert len(ids) == len(set(ids))
    # every panel and query reads the catalog through the dashboard's datasource variable, raw SQL
    ds = {"type": "grafana-postgresql-datasource", "uid": "${catalog}"}
    assert all(p["datasource"] == ds and all(t["datasource"] == ds and t["rawSql"] for t in p["targets"])
               for p in original["panels"])
    src = yaml.safe_load((ROOT / "deploy/grafana/history-datasource.yaml").read_text())["datasources"][0]
    assert src["type"] == ds["type"]
    kustomize = yaml.safe_load((ROOT / "deploy/grafana/kustomization.yaml").read_text())
    assert ["history-dashboard.json"] in [g["files"] for g in kustomize["configMapGenerator"]]


@pytest.mark.cpu
@pytest.mark.parametrize("name", sorted(CI_FILES))
def test_ci_examples_follow_their_published_schemas(name):
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    published = json.loads((vendor / f"{CI_FILES[name]}.json").read_text())
    text = (ROOT / "deploy/ci" / name).read_text()
    jsonschema.Draft7Validator(published).validate(yaml.safe_load(text))
    # docs/ci.md shows the file as it is
    doc = (ROOT / "docs/ci.md").read_text()
    assert f"```yaml\n{text}```" in doc, f"docs/ci.md does not show deploy/ci/{name} as it is"
    # every pipeline rehearses a repeat set (3 unless CAPACITY_REPEATS says otherwise) with the
    # catalog, records the build's label and gates on the baseline
    assert re.search(r'capacity run scenarios/ci-gate\.yaml .*--repeat "\$\{CAPACITY_REPEATS:-3\}" .*--label build=', text)
    assert "capacity gate --baseline release" in text and "CAPACITY_HISTORY" in text
