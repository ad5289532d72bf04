"""The public API, locked: what `capacity_plugins` exports, and the package's own locustfile.

Changing either is a breaking change for users' locustfiles and scripts: this file must change
with it, on purpose.
"""

from __future__ import annotations

import pytest
from helpers.paths import ROOT
from helpers.processes import python, run_locust
from helpers.results import read_records
from helpers.scenarios import write_corpus

import capacity_plugins

EXPORTS = [
    "CapacityEvents",
    "LLMOptions",
    "LLMRequestError",
    "LLMUser",
    "RequestRecord",
    "Scenario",
    "StepRow",
    "__version__",
    "analyze",
    "install",
    "load_corpus",
    "load_scenario",
    "register",
]

PACKAGE_LOCUSTFILE = ROOT / "capacity_plugins" / "locustfile.py"


def test_all_is_exactly_the_public_names_sorted():
    assert capacity_plugins.__all__ == EXPORTS
    assert sorted(capacity_plugins.__all__) == capacity_plugins.__all__
    assert dir(capacity_plugins) == EXPORTS


@pytest.mark.parametrize("name", EXPORTS)
def test_every_public_name_resolves(name):
    # the package exports lazily (__getattr__): each name must import from where it is defined
    assert getattr(capacity_plugins, name) is not None
    assert name in {"__version__"} or getattr(capacity_plugins, name).__name__ == name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        capacity_plugins.NoSuchThing  # noqa: B018 - the attribute access is the test


def test_run_context_is_gone():
    # Before 1.0 the shared RunContext was split into parts owned by one role each, attached to the
    # environment by register(): capacity_events, capacity_client, capacity_source (docs/architecture.md)
    with pytest.raises(AttributeError, match="no attribute 'RunContext'"):
        capacity_plugins.RunContext  # noqa: B018
    r = python("import capacity_plugins.client.context")
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr


def test_the_removed_shims_are_gone():
    # before 1.0 the old top-level paths were removed, not kept as re-exports: one path per name
    for old in ("users", "rehearsal_locustfile", "record", "corpus_build", "corpus_cli"):
        r = python(f"import capacity_plugins.{old}")
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, old


def test_the_package_locustfile_is_a_locustfile_with_the_llm_user():
    # Locust's own loader (in a fresh interpreter: loading a locustfile installs the plugin's hooks)
    code = ("from locust.util.load_locustfile import load_locustfile\n"
            "from capacity_plugins import LLMUser\n"
            f"users, shapes = load_locustfile({str(PACKAGE_LOCUSTFILE)!r})\n"
            "assert list(users) == ['LLM'] and issubclass(users['LLM'], LLMUser), users\n"
            "assert shapes == [], shapes\n")
    r = python(code)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow  # a real locust process
def test_the_package_locustfile_runs_under_locust(fake_llm, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 1200)
    # --stop-timeout: at -t the users finish the request they are in, so a machine too busy to finish
    # one within the 2 s still records it as done rather than cancelled.
    p = run_locust(["--headless", "-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "30", "--host", fake_llm,
                    "--model", "ok", "--corpus", str(corpus), "--min-distinct", "1000", "--max-tokens", "8",
                    "--results-dir", str(tmp_path / "out"), "--exit-code-on-error", "0", "--only-summary"],
                   locustfile=PACKAGE_LOCUSTFILE, timeout=90)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    recs = read_records(tmp_path / "out")
    assert recs and any(r["ok"] for r in recs), [(r.get("error_kind"), r.get("error")) for r in recs]
