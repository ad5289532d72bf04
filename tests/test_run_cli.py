"""`capacity run` pieces that need no processes: the Locust command line, folders, the SLO gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity_plugins.errors import UserError
from capacity_plugins.runner import _parse, locust_command, results_folder
from capacity_plugins.scenario import load_scenario


@pytest.fixture
def scenario(tmp_path: Path):
    p = tmp_path / "s.yaml"
    p.write_text(f"name: s1\ntarget: {{url: 'http://127.0.0.1:9', model: m}}\nrequest: {{max_tokens: 33}}\noutput: {tmp_path / 'out'}\n")
    return p, load_scenario(p)


def flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def test_headless_command_carries_scenario_and_folder_not_request_options(scenario, tmp_path):
    path, s = scenario
    args = _parse([str(path)])
    folder = results_folder(s, None)
    cmd = locust_command(s, args, "http://127.0.0.1:9", "m", folder)
    assert flag(cmd, "--scenario") == str(path.resolve())
    assert flag(cmd, "--results-dir") == str(folder) and folder.parent == tmp_path / "out"
    # request settings travel in the scenario file, read once by the child (client/options.py)
    assert "--max-tokens" not in cmd and "--model" not in cmd
    assert "--headless" in cmd and flag(cmd, "--exit-code-on-error") == "0"  # failed requests are data
    assert flag(cmd, "--csv") == str(folder / "locust")


def test_processes_master_worker_and_web_flags(scenario):
    path, s = scenario
    folder = Path("/tmp/x")
    cmd = locust_command(s, _parse([str(path), "--processes", "2"]), "http://h:1", "m", folder)
    assert flag(cmd, "--processes") == "2" and flag(cmd, "--master-bind-port") == flag(cmd, "--master-port")
    cmd = locust_command(s, _parse([str(path), "--master", "--expect-workers", "3"]), "http://h:1", "m", folder)
    assert "--master" in cmd and flag(cmd, "--expect-workers") == "3"
    cmd = locust_command(s, _parse([str(path), "--worker", "--master-host", "10.0.0.5"]), None, None, None)
    assert "--worker" in cmd and flag(cmd, "--master-host") == "10.0.0.5" and "--results-dir" not in cmd
    cmd = locust_command(s, _parse([str(path), "--web", "--web-port", "8123"]), "http://h:1", "m", folder)
    assert "--headless" not in cmd and flag(cmd, "--web-port") == "8123"


@pytest.mark.parametrize(
    "argv",
    [["s.yaml", "--master", "--worker"], ["s.yaml", "--processes", "0"], ["s.yaml", "--worker", "--web"], ["s.yaml", "--bogus"]],
)
def test_bad_flags_are_user_errors(argv):
    with pytest.raises(UserError):
        _parse(argv)


def test_results_folders_never_collide(scenario):
    _, s = scenario
    a = results_folder(s, None)
    a.mkdir(parents=True)
    b = results_folder(s, None)
    assert a != b and b.parent == a.parent


def test_preflight_follows_target_insecure_on_a_self_signed_server(fake_llm_tls):
    from capacity_plugins.errors import RunError
    from capacity_plugins.runner import preflight
    from capacity_plugins.scenario import parse_scenario

    def scenario(insecure: bool):
        return parse_scenario({"target": {"url": fake_llm_tls, "insecure": insecure, "model": "fake-model"}}, "s.yaml")

    with pytest.raises(RunError, match="CERTIFICATE_VERIFY_FAILED"):
        preflight(scenario(False), fake_llm_tls)  # verified by default
    assert preflight(scenario(True), fake_llm_tls) == "fake-model"  # the opt-in covers the preflight
