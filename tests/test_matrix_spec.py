"""MATRIX.yaml: what a valid file means, and one line (file, line, field) for each bad one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capacity_plugins.errors import UserError
from capacity_plugins.matrix.spec import DEFAULT_URL, READY_TIMEOUT_S, READY_TIMEOUT_URL_S, load_matrix

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    (tmp_path / "s.yaml").write_text("target: {url: 'http://127.0.0.1:9'}\n")
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """\
name: slots
scenario: s.yaml
output: out/
entries:
  - name: a
    command: capacity simulate --port {port} --max-num-seqs 2
    gpus: 2
    gpu_hour_usd: 3
    env: {CUDA_VISIBLE_DEVICES: 0, FLAG: true}
    teardown: echo bye {port}
  - name: prod
    url: http://gpu-node:8000/
    ready: {url: /health, timeout_s: 5}
"""


def test_a_valid_matrix_and_its_defaults(tmp_path):
    m = load_matrix(write(tmp_path, GOOD))
    assert m.name == "slots" and m.output == "out/" and m.scenario == (tmp_path / "s.yaml").resolve()
    a, prod = m.entries
    assert a.url == DEFAULT_URL and a.needs_port and a.gpus == 2 and a.gpu_hour_usd == 3.0
    assert a.env == {"CUDA_VISIBLE_DEVICES": "0", "FLAG": "true"} and a.teardown == "echo bye {port}"
    assert a.ready.url is None and a.ready.timeout_s == READY_TIMEOUT_S  # the dialect's route, minutes to load
    assert prod.url == "http://gpu-node:8000" and prod.command is None and not prod.needs_port
    assert prod.ready.url == "/health" and prod.ready.timeout_s == 5
    assert prod.gpus is None and prod.gpu_hour_usd is None  # the scenario's capacity section decides


def test_name_defaults_to_the_file_stem_and_url_entries_wait_less(tmp_path):
    m = load_matrix(write(tmp_path, "scenario: s.yaml\nentries: [{name: x, url: 'http://h:1'}]\n", "my-matrix.yaml"))
    assert m.name == "my-matrix" and m.output == "results/"
    assert m.entries[0].ready.timeout_s == READY_TIMEOUT_URL_S


def test_the_scenario_is_found_next_to_the_matrix_file_first(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    p = write(sub, "scenario: s.yaml\nentries: [{name: x, url: 'http://h:1'}]\n")
    monkeypatch.chdir(tmp_path)
    assert load_matrix(p).scenario == (sub / "s.yaml").resolve()


BAD = [
    ("scenario: s.yaml\nentries: [{name: x, url: 'http://h:1'}]\nentrys: []\n", "m.yaml:3: entrys: unknown key"),
    ("entries: [{name: x, url: 'http://h:1'}]\n", "m.yaml:1: scenario: required"),
    ("scenario: nope.yaml\nentries: [{name: x, url: 'http://h:1'}]\n", "m.yaml:1: scenario: nope.yaml: no such file"),
    ("scenario: s.yaml\nentries: []\n", "m.yaml:2: entries: must be a non-empty list"),
    ("scenario: s.yaml\nentries:\n  - name: x\n", "m.yaml:3: entries[0]: needs a url"),
    ("scenario: s.yaml\nentries:\n  - {url: 'http://h:1'}\n", "m.yaml:3: entries[0]: name: required"),
    ("scenario: s.yaml\nentries:\n  - name: a/b\n    url: http://h:1\n", "m.yaml:3: entries[0].name: must be letters"),
    ("scenario: s.yaml\nentries:\n  - {name: a, url: 'http://h:1'}\n  - {name: a, url: 'http://h:2'}\n",
     "m.yaml:4: entries[1].name: 'a' is used twice"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    gpus: 0\n", "m.yaml:5: entries[0].gpus: must be an integer >= 1"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    gpus: 1.5\n", "m.yaml:5: entries[0].gpus: must be an integer"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    gpu_hour_usd: -1\n",
     "m.yaml:5: entries[0].gpu_hour_usd: must be a number > 0"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    url: ftp://h\n", "m.yaml:4: entries[0].url: 'ftp://h' is not an http(s)"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    url: 'http://h:{port}'\n",
     "m.yaml:4: entries[0].url: {port} is a port the matrix picks"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    ready: {url: health}\n",
     "m.yaml:5: entries[0].ready.url: 'health' is not an http(s)://host[:port] URL or a /path"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    ready: {timeout_s: 0}\n",
     "m.yaml:5: entries[0].ready.timeout_s: must be a number > 0"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    ready: {wait: 3}\n",
     "m.yaml:5: entries[0].ready.wait: unknown key"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    env: {1X: a}\n",
     "m.yaml:5: entries[0].env.1X: not an environment variable name"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: ''\n", "m.yaml:4: entries[0].command: must be a non-empty string"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    teardwon: y\n", "m.yaml:5: entries[0].teardwon: unknown key"),
    # An unknown key names the one it is closest to, at any depth; the known ones when none is close.
    ("scenario: s.yaml\nentries: [{name: x, url: 'http://h:1'}]\nentrys: []\n", "m.yaml:3: entrys: unknown key (did you mean entries?)"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    teardwon: y\n",
     "m.yaml:5: entries[0].teardwon: unknown key (did you mean teardown?)"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    ready: {timeout: 3}\n",
     "m.yaml:5: entries[0].ready.timeout: unknown key (did you mean timeout_s?)"),
    ("scenario: s.yaml\nentries:\n  - name: a\n    command: x\n    ready: {qqqq: 3}\n",
     "m.yaml:5: entries[0].ready.qqqq: unknown key (known: url, timeout_s)"),
    ("scenario: s.yaml\nentries: [a, b\n", "m.yaml:3: YAML syntax error"),
    ("- just a list\n", "m.yaml:1: expected a mapping"),
]


@pytest.mark.parametrize(("text", "says"), BAD)
def test_bad_matrix_is_one_line_naming_file_line_and_field(tmp_path, text, says):
    with pytest.raises(UserError) as e:
        load_matrix(write(tmp_path, text))
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg
    assert msg.split(str(tmp_path) + "/", 1)[1].startswith(says), msg


def test_the_shipped_matrix_loads_and_names_a_shipped_scenario():
    from capacity_plugins.scenario import load_scenario

    for f in sorted((ROOT / "scenarios").glob("matrix-*.yaml")):
        m = load_matrix(f)
        assert m.scenario.parent == ROOT / "scenarios"
        s = load_scenario(m.scenario)
        assert not s.target.embedded and s.repeat == 1  # what `capacity matrix` requires of its scenario
        assert yaml.safe_load(f.read_text())["entries"]
