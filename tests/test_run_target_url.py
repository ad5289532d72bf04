"""`capacity run --target-url URL`: the scenario's target.url replaced, checked by the scenario's own rule."""

from __future__ import annotations

import pytest
import yaml
from helpers.ports import free_port
from helpers.processes import capacity
from helpers.results import results_dir
from helpers.scenarios import write_scenario

from capacity_plugins.errors import UserError
from capacity_plugins.runner import _parse, with_target_url
from capacity_plugins.scenario import load_scenario


def test_the_override_replaces_only_the_url(tmp_path):
    p = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9", "model": "m", "headers": {"X-A": "b"}})
    s = with_target_url(load_scenario(p), "http://127.0.0.1:8123/")
    assert s.target.url == "http://127.0.0.1:8123" and s.target.model == "m" and s.target.headers == {"X-A": "b"}
    assert s.source_path == p.resolve() and s.name == "t"


@pytest.mark.parametrize(("url", "says"), [("ftp://h", r"is not an http\(s\)://host\[:port\] URL"),
                                           ("http://h:70000", "Port out of range"), ("embedded", "not an http")])
def test_a_bad_url_is_a_user_error(tmp_path, url, says):
    s = load_scenario(write_scenario(tmp_path, target={"url": "http://127.0.0.1:9"}))
    with pytest.raises(UserError, match=says):
        with_target_url(s, url)


@pytest.mark.slow  # `capacity run`
def test_no_meaning_on_a_worker_nor_with_an_embedded_scenario(tmp_path):
    with pytest.raises(UserError, match="--target-url has no meaning on a worker"):
        _parse(["s.yaml", "--worker", "--target-url", "http://h:1"])
    p = write_scenario(tmp_path, target={"url": "embedded"})
    r = capacity("run", str(p), "--target-url", "http://127.0.0.1:9", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "target.url is embedded" in r.stderr, r.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # `capacity run`
def test_the_preflight_checks_the_override_not_the_scenario_url(tmp_path, simulator):
    """The scenario names a live simulator; the override names a closed port: the run must fail on the override."""
    dead = free_port()
    p = write_scenario(tmp_path, target={"url": simulator.url})
    r = capacity("run", str(p), "--target-url", f"http://127.0.0.1:{dead}", timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"target http://127.0.0.1:{dead} does not answer" in r.stderr


@pytest.mark.slow
def test_the_run_folder_names_the_server_actually_loaded(tmp_path, simulator):
    # The scenario names a dead port; --target-url the live simulator: every file of the run,
    # the scenario copy that `capacity analyze` reads back included, must name the simulator.
    dead = free_port()
    p = write_scenario(tmp_path, target={"url": f"http://127.0.0.1:{dead}"}, request={"max_tokens": 8},
                       load={"levels": [1], "step_s": 2, "warmup_s": 0})
    r = capacity("run", str(p), "--target-url", simulator.url, "--no-analyze", timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    folder = results_dir(r.stdout)
    copy = yaml.safe_load((folder / "scenario.yaml").read_text())
    assert copy["target"]["url"] == simulator.url
    assert str(dead) not in (folder / "scenario.yaml").read_text()
