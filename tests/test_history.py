"""The run catalog and the regression gate on ten runs of three builds (issue 31's "done when").

Build a (the baseline, 4 repeats) and build b (3) on an 8-slot server, build c (3) on the same
server with 4 batch slots: repeat sets of scenarios/ci-gate.yaml run by the simulator's own engine
in virtual time (tests/helpers/history_builds.py) — their capacity is the engine's, not the host's
load, and 1000 requests per step cost no wall time. `capacity history add` records the three sets
(and their ten repeats) into the embedded SQLite catalog and into a real PostgreSQL
(tests/helpers/postgres.py), set a is blessed as `release` in both, and every assertion on the
catalog is made on both. The gate runs at its default margin (10 %): the sets' run-to-run
intervals are about ±2 % (the engine's own spread over 1000-request windows), the 4-slot build's
loss about a third. The CI examples' own commands, run as real processes against the simulator,
are tests/test_history_ci.py.

`cpu`: analyses of written results and catalog queries, nothing timed (tests/README.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers.history_builds import BUILDS, SIMULATOR_PROBE, record, virtual_builds
from helpers.paths import ROOT
from helpers.postgres import Postgres

from capacity_plugins.cli import main
from capacity_plugins.history.gate import DEFAULT_MARGIN

pytestmark = pytest.mark.cpu

REPEATS = {b: n for b, (n, _) in BUILDS.items()}
DASHBOARD = ROOT / "deploy/grafana/history-dashboard.json"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Any:
    tmp = tmp_path_factory.mktemp("history")
    pg = Postgres()
    try:
        sets = virtual_builds(tmp / "results")
        sqlite = str(tmp / "history.sqlite")
        for where in (sqlite, pg.url):
            record(sets, where)
        yield {"sets": sets, "catalogs": {"sqlite": sqlite, "postgresql": pg.url}, "pg": pg}
    finally:
        pg.stop()


CATALOGS = ("sqlite", "postgresql")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`capacity ARGV` through its main in this process (cheaper than a process per command; the
    commands' own processes are tested by tests/test_history_ci.py): exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys, where: str, *extra: str) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "history", "list", "--format", "json", "--history", where, *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("kind", CATALOGS)
def test_ten_runs_of_three_builds_are_recorded(history, kind, capsys):
    where = history["catalogs"][kind]
    sets = listed(capsys, where)
    assert [(s["kind"], s["labels"]["build"], s["repeats"]) for s in sorted(sets, key=lambda s: s["labels"]["build"])] \
        == [("repeat_set", b, n) for b, n in REPEATS.items()]
    everything = listed(capsys, where, "--all")
    repeats = [r for r in everything if r["kind"] == "run"]
    assert len(repeats) == 10 and all(r["parent_id"] in {s["id"] for s in sets} for r in repeats)
    for r in everything:
        # the scenario's labels under the pipeline's --label; the server's own version string
        assert r["labels"]["pipeline"] == "ci" and r["scenario"] == "ci-gate"
        assert r["engine"] == "simulator" and r["engine_version"] == SIMULATOR_PROBE["version"]["version"], r
        assert r["valid_steps"] == 2 and r["verdict"], r
    only_b = listed(capsys, where, "--label", "build=b", "--all")
    assert {r["labels"]["build"] for r in only_b} == {"b"} and len(only_b) == 4


@pytest.mark.parametrize("kind", CATALOGS)
def test_the_trend_shows_the_drop(history, kind, tmp_path, capsys):
    where = history["catalogs"][kind]
    code, _, err = cli(capsys, "history", "trend", "--by", "build", "--out", str(tmp_path), "--history", where)
    assert code == 0, err
    assert (tmp_path / "trend.png").read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / "trend.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and page.count("<tr>") == 1 + 3
    # what the plot draws: build c's capacity interval lies wholly below both others'
    cap = {s["labels"]["build"]: s for s in listed(capsys, where)}
    assert cap["c"]["capacity_hi"] < min(cap["a"]["capacity_lo"], cap["b"]["capacity_lo"]), cap
    assert cap["c"]["capacity_rps"] < 0.8 * cap["a"]["capacity_rps"]
    for b in "ab":
        assert cap[b]["capacity_interval_kind"] == "run_to_run"
        assert cap[b]["capacity_lo"] <= cap[b]["capacity_rps"] <= cap[b]["capacity_hi"]


@pytest.mark.parametrize("kind", CATALOGS)
def test_the_gate_fails_the_degraded_build_only(history, kind, capsys):
    where, sets = history["catalogs"][kind], history["sets"]
    for build in "ab":
        # the default margin: every figure's interval (capacity, TTFT P95, E2E P99) within it
        code, out, err = cli(capsys, "gate", "--baseline", "release", str(sets[build]), "--history", where)
        assert code == 0, out + err
        assert out.startswith("gate: not worse — capacity ") and out.count(f": not worse than the {DEFAULT_MARGIN:.0%} margin") == 3, out
    code, out, err = cli(capsys, "gate", "--baseline", "release", str(sets["c"]), "--history", where, "--format", "json")
    assert code == 3, out + err
    doc = json.loads(out)
    cap = next(c for c in doc["checks"] if c["metric"].startswith("capacity"))
    assert doc["decision"] == "worse" and cap["decision"] == "worse"
    lo, hi = cap["change_ci"]
    assert lo <= cap["change"] <= hi < -doc["margin"], cap  # the whole interval is a loss beyond the margin
    worse = r"capacity −\d+ % \[−\d+, −\d+\]: worse beyond the " + f"{DEFAULT_MARGIN:.0%} margin"
    assert doc["margin"] == DEFAULT_MARGIN and re.search(worse, doc["line"]), doc["line"]


def test_single_runs_cannot_decide_and_say_what_would(history, capsys):
    one = history["sets"]["b"] / "repeat-1"
    # the same two builds the sets told apart, one repeat each: a single run carries the 10 %
    # allowance for what a second run would differ by, so no interval can be within the margin
    code, out, err = cli(capsys, "gate", "--baseline", str(history["sets"]["a"] / "repeat-1"), str(one))
    assert code == 2, out + err
    assert out.startswith("gate: cannot decide — capacity ")
    assert "repeat sets of at least 3 on each side" in out


def _grafana_sql(sql: str, values: dict[str, str]) -> str:
    """A panel's SQL as Grafana's PostgreSQL datasource sends it: the template variables' values,
    and $__unixEpochFilter(col) as `col >= FROM AND col <= TO` (the dashboard's range)."""
    sql = re.sub(r"\$__unixEpochFilter\(([^)]+)\)", lambda m: f"{m[1]} >= {values['from']} AND {m[1]} <= {values['to']}",
                 sql)
    for name in ("scenario", "label"):
        sql = sql.replace("${" + name + "}", values[name])
    assert "$" not in sql, sql
    return sql


def test_every_dashboard_query_answers_from_the_catalog(history):
    import psycopg

    dash = json.loads(DASHBOARD.read_text())
    values = {"scenario": "ci-gate", "label": "build", "from": "0", "to": "4102444800"}
    with psycopg.connect(history["pg"].url) as db:
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                got = [r[0] for r in db.execute(var["query"]).fetchall()]
                assert values[var["name"]] in got, (var["name"], got)
        tables: dict[str, list[tuple[Any, ...]]] = {}
        for panel in dash["panels"]:
            for target in panel["targets"]:
                cur = db.execute(_grafana_sql(target["rawSql"], values))
                rows = cur.fetchall()
                assert rows, f"{panel['title']}: no rows"
                tables[panel["title"]] = [dict(zip([d.name for d in cur.description], r, strict=True)) for r in rows]
    per_build = {r["build"]: r for r in tables["Capacity per build"]}
    assert set(per_build) == {"a", "b", "c"}
    assert per_build["c"]["capacity_rps"] < 0.8 * min(per_build["a"]["capacity_rps"], per_build["b"]["capacity_rps"])
    assert sum(r["runs"] for r in tables["Verdicts per build"]) == 3
    series = tables["Capacity per node under the SLO, with its interval"]
    assert len(series) == 3 and all(r["low"] <= r["capacity"] <= r["high"] for r in series)
    assert [r["name"] for r in tables["Baselines"]] == ["release"]
