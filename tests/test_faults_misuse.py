"""Misuse is exit 2 before any side effect, with one line that never shows a secret.

tests/test_run_misuse.py covers most flags; this adds the flags it leaves out, the secrets that
are too short to redact (API key, a gateway header from the environment, a URL password), a bad
scenario or corpus, and the commands themselves. The target is the fault server, so "before any
side effect" is checked where it matters: it never sees a request (no preflight, no load), and
no results folder is created.
"""

from __future__ import annotations

import pytest
from helpers.faults import FaultSecrets, write_fault_corpus
from helpers.processes import capacity, env_with, run_locust
from helpers.scenarios import write_scenario

pytestmark = pytest.mark.slow  # `capacity run` / `locust` processes (each exits 2 before it starts anything)

# distinctive values under the 6-character minimum: refused, and never printed back
SHORT = "Qz9kX"


def _scenario(tmp_path, server_url, **over):
    target = FaultSecrets().target(server_url)
    target.update(over.pop("target", {}))
    sections = {"target": target, "load": {"levels": [1], "step_s": 2, "warmup_s": 0}}
    sections.update(over)
    return write_scenario(tmp_path, "misuse", **sections)


def _env(**over):
    return env_with(**{**FaultSecrets().env(), **over})


def _check_refused(p, tmp_path, says, seen_before, server, *, locust=False):
    out = p.stdout + p.stderr
    assert p.returncode == 2, (p.returncode, out[-2000:])
    assert says in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    if locust:  # Locust's own log lines ("[date] host/INFO/locust.main: Starting Locust") are not ours
        lines = [line for line in lines if "/locust." not in line]
    assert "Traceback" not in out and len(lines) == 1, p.stderr
    assert not (tmp_path / "results").exists()  # no folder
    assert server.seen() == seen_before  # no preflight, no load
    s = FaultSecrets()
    assert not [v for v in (*s.values(), SHORT) if v in out], out


@pytest.mark.parametrize(("extra", "says"), [
    (["--worker", "--web"], "--web has no meaning on a worker"),
    (["--worker", "--master-port", "0"], "--master-port: must be a port"),
    (["--exporter-port", "-1"], "--exporter-port: must be a port"),
    (["--processes", "-2"], "--processes: must be a positive number"),
    (["--processes", "2", "--worker"], "--processes runs its own master"),
    (["--fail-on-verdict", "maybe"], "invalid choice"),
    (["--repeat", "twice"], "invalid int value"),
])
def test_flags_the_misuse_table_leaves_out(fresh_fault_server, tmp_path, extra, says):
    fault_server = fresh_fault_server
    sc = _scenario(tmp_path, fault_server.url)
    before = fault_server.seen()
    p = capacity("run", str(sc), *extra, timeout=60, env=_env())
    _check_refused(p, tmp_path, says, before, fault_server)


@pytest.mark.parametrize(("case", "says"), [
    ("api key unset", "FAULT_API_KEY_UNSET"),
    ("api key too short", "target.api_key_env FAULT_API_KEY: a secret shorter than 6 characters"),
    ("gateway header too short", "header X-Gateway-Key: a secret shorter than 6 characters"),
    ("url password too short", "the target URL's password: a secret shorter than 6 characters"),
    ("unknown key", "load.levls"),
    ("unset variable", "NO_SUCH_FAULT_VAR"),
    ("too few prompts", "only 3 distinct prompts"),
    ("missing scenario", "no-such-scenario.yaml: scenario file not found"),
])
def test_bad_scenario_or_secret(fresh_fault_server, tmp_path, case, says):
    fault_server = fresh_fault_server
    env = _env()
    over: dict = {}
    if case == "api key unset":
        over["target"] = {"api_key_env": "FAULT_API_KEY_UNSET"}
    elif case == "api key too short":
        env["FAULT_API_KEY"] = SHORT
    elif case == "gateway header too short":
        env["GATEWAY_KEY"] = SHORT
    elif case == "url password too short":
        over["target"] = {"url": fault_server.url.replace("://", f"://alice:{SHORT}@")}
    elif case == "unknown key":
        over["load"] = {"levls": [1]}
    elif case == "unset variable":
        over["target"] = {"model": "${NO_SUCH_FAULT_VAR}"}
    elif case == "too few prompts":
        over["corpus"] = {"path": str(write_fault_corpus(tmp_path / "few.jsonl", ["ok"], per_mode=3)),
                          "min_distinct": 10}
    sc = _scenario(tmp_path, fault_server.url, **over)
    if case == "missing scenario":
        sc = tmp_path / "no-such-scenario.yaml"
    before = fault_server.seen()
    p = capacity("run", str(sc), timeout=60, env=env)
    _check_refused(p, tmp_path, says, before, fault_server)


@pytest.mark.parametrize(("args", "says"), [([], "command"), (["bogus"], "unknown command 'bogus'")])
def test_no_or_unknown_command(args, says):
    p = capacity(*args, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert says in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr


@pytest.mark.parametrize("extra", [["--header", f"X-Api-Key: {SHORT}"], ["--api-key-env", "FAULT_API_KEY"]],
                         ids=["header", "api-key"])
def test_plain_locust_refuses_a_secret_too_short(fresh_fault_server, tmp_path, extra):
    fault_server = fresh_fault_server
    corpus = write_fault_corpus(tmp_path / "c.jsonl", ["ok"], per_mode=20)
    before = fault_server.seen()
    p = run_locust(
        ["--headless", "-u", "1", "-t", "2s", "--host", fault_server.url, "--corpus", str(corpus),
         "--min-distinct", "1", "--model", "fault-model", "--results-dir", str(tmp_path / "results"), *extra],
        timeout=90, env=_env(FAULT_API_KEY=SHORT),
    )
    _check_refused(p, tmp_path, "shorter than 6 characters", before, fault_server, locust=True)
