"""A target URL is the server's root: a path the dialect appends itself (`/v1`) is refused in one
line before anything starts, naming the field as given and the URL to use instead (issue 25,
observation 9: `TARGET_URL=http://host:port/v1` led to "lists no model", then to a 404 on
/v1/v1/chat/completions). A prefix that is not an API path (a reverse proxy's) still works."""

from __future__ import annotations

import pytest
from helpers.processes import capacity, env_with, run_locust
from helpers.scenarios import scenario_error, write_scenario

from capacity_plugins.contracts.dialects import API_PATHS, DIALECTS, url_path_problem
from capacity_plugins.dialects import RequestParams, get_dialect
from capacity_plugins.errors import UserError
from capacity_plugins.runner import with_target_url
from capacity_plugins.scenario import load_scenario

ROOT_ADVICE = "http://h:8000/v1 has a path (/v1); give the server's root, http://h:8000 — the openai-chat dialect adds /v1/chat/completions"


@pytest.mark.parametrize(
    ("url", "dialect", "root"),
    [
        ("http://h:8000/v1", "openai-chat", "http://h:8000"),
        ("http://h:8000/v1/", "openai-chat", "http://h:8000"),
        ("http://h:8000/v1/chat/completions", "openai-chat", "http://h:8000"),
        ("http://h:8000/v1/models", "openai-chat", "http://h:8000"),
        ("http://h:8000/v1", "openai-completions", "http://h:8000"),
        ("http://gw/llm/v1", "openai-chat", "http://gw/llm"),  # a proxy prefix, then the API's own path
        ("http://h/generate", "tgi", "http://h"),
        ("http://h/generate_stream", "tgi", "http://h"),
        ("http://h/api", "ollama", "http://h"),
        ("http://h/api/generate", "ollama-generate", "http://h"),
        ("http://h/v2/models/ensemble", "triton-generate", "http://h"),
        ("http://h/v2", "triton-generate", "http://h"),
    ],
)
def test_a_path_the_dialect_adds_is_refused_with_the_root_to_use(url, dialect, root):
    found = url_path_problem(url, dialect)
    assert found is not None
    assert f"give the server's root, {root} —" in found or f"give {root} —" in found, found
    assert found.startswith(url) and f"{dialect} dialect" in found and found.endswith(f"adds {API_PATHS[dialect][0]}")


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("http://h:8000", "openai-chat"),
        ("http://h:8000/", "openai-chat"),
        ("http://gw/llm", "openai-chat"),  # a reverse proxy's prefix: the dialect's paths go after it
        ("http://gw/api", "openai-chat"),  # /api is Ollama's, not OpenAI's
        ("http://gw/v1", "ollama"),
        ("https://gw:443/team/a", "triton-generate"),
    ],
)
def test_the_root_or_a_prefix_that_is_no_api_path_is_kept(url, dialect):
    assert url_path_problem(url, dialect) is None


def test_the_advice_never_shows_the_urls_password():
    found = url_path_problem("http://user:pw-secret@h:8000/v1", "openai-chat")
    assert found is not None and "pw-secret" not in found and "http://h:8000 —" in found


@pytest.mark.parametrize("name", DIALECTS)
def test_api_paths_are_the_paths_each_dialect_sends_to(name):
    """The rule's table and the dialects stay in step: every path a dialect uses is listed."""
    d = get_dialect(name)
    used = {d.build(_Sample(), RequestParams(model="m", max_tokens=4, stream=s, include_usage=False)).path.replace("/m/", "/{model}/")
            for s in (True, False)}
    used |= {p for p in (d.models_path, getattr(d, "ready_path", None)) if p}
    assert used <= set(API_PATHS[name]) and API_PATHS[name][0] in used


class _Sample:
    id = "s"
    max_tokens = 4
    text = "hi"

    def as_messages(self):
        return [{"role": "user", "content": self.text}]


def test_the_scenario_loader_names_target_url_in_one_line(tmp_path):
    msg = scenario_error(tmp_path, "target: {url: 'http://h:8000/v1'}\n")
    assert msg == f"{tmp_path / 's.yaml'}: target.url: {ROOT_ADVICE}"


def test_a_url_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("CAP_TEST_TARGET_URL", "http://h:8000/v1")
    msg = scenario_error(tmp_path, "target: {url: '${CAP_TEST_TARGET_URL:-http://127.0.0.1:8000}'}\n")
    assert msg.endswith(f"target.url: {ROOT_ADVICE} (from ${{CAP_TEST_TARGET_URL:-http://127.0.0.1:8000}})")


def test_a_prefix_and_the_embedded_simulator_load(tmp_path):
    assert load_scenario(write_scenario(tmp_path, target={"url": "http://gw/llm/"})).target.url == "http://gw/llm"
    assert load_scenario(write_scenario(tmp_path, target={"url": "embedded"})).target.embedded


def test_target_url_flag_names_the_flag(tmp_path):
    s = load_scenario(write_scenario(tmp_path, target={"url": "http://127.0.0.1:9"}))
    with pytest.raises(UserError) as e:
        with_target_url(s, "http://h:8000/v1")
    assert str(e.value) == f"--target-url: {ROOT_ADVICE}"
    assert with_target_url(s, "http://gw/llm").target.url == "http://gw/llm"


@pytest.mark.slow  # `capacity run`
@pytest.mark.parametrize("how", ["env", "flag"])
def test_capacity_run_refuses_it_in_one_line_exit_2_before_anything_starts(tmp_path, how):
    url = "http://127.0.0.1:9/v1"
    target = {"url": "${CAP_TEST_TARGET_URL:-http://127.0.0.1:9}"}
    p = write_scenario(tmp_path, target=target)
    if how == "env":
        r = capacity("run", str(p), env=env_with(CAP_TEST_TARGET_URL=url), timeout=60)
        field = f"{p}: target.url: "
    else:
        r = capacity("run", str(p), "--target-url", url, timeout=60)
        field = "--target-url: "
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{field}{url} has a path (/v1); give the server's root, http://127.0.0.1:9 — the openai-chat dialect adds " \
           "/v1/chat/completions" in lines[0]
    assert not (tmp_path / "results").exists()


def test_capacity_matrix_refuses_an_entry_url_with_the_api_path(tmp_path):
    sc = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9"})
    marker = tmp_path / "started"
    m = tmp_path / "m.yaml"
    m.write_text(f"scenario: {sc}\noutput: {tmp_path / 'out'}\nentries:\n"
                 f"  - name: a\n    command: touch {marker}\n    url: 'http://127.0.0.1:{{port}}/v1'\n")
    r = capacity("matrix", str(m), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (f"capacity matrix: error: {m}: entries[0].url: http://127.0.0.1:{{port}}/v1 has a path (/v1); "
                                "give the server's root, http://127.0.0.1:{port} — the openai-chat dialect adds /v1/chat/completions")
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.slow  # a real Locust process
def test_plain_locust_refuses_a_host_with_the_api_path(tmp_path):
    p = run_locust(["--headless", "-u", "1", "-t", "2s", "--host", "http://127.0.0.1:9/generate", "--dialect", "tgi",
                    "--results-dir", str(tmp_path / "results")], timeout=90)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert ("capacity: --host: http://127.0.0.1:9/generate has a path (/generate); give the server's root, "
            "http://127.0.0.1:9 — the tgi dialect adds /generate_stream") in p.stderr
    assert not (tmp_path / "results").exists()
