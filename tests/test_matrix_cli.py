"""`capacity matrix` without a load run: bad input (exit 2, nothing started) and entries that fail
before or at the preflight (each a row with its reason, the others still tried, exit 1, teardown
always). Real processes and servers on 127.0.0.1; the sweeps themselves are in test_matrix_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.ports import free_port
from helpers.processes import CAPACITY, capacity, popen, processes_with
from helpers.scenarios import write_scenario


def write_matrix(tmp_path: Path, entries: list[dict], scenario: Path, **top) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({"scenario": str(scenario), "output": str(tmp_path / "out"), "entries": entries,
                                 **top}))
    return p


def test_bad_matrix_is_one_line_exit_2_and_nothing_starts(tmp_path):
    sc = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9"})
    marker = tmp_path / "started"
    p = tmp_path / "m.yaml"
    p.write_text(f"scenario: {sc}\noutput: {tmp_path / 'out'}\nentries:\n"
                 f"  - name: a\n    command: touch {marker}\n"
                 "  - name: b\n    command: 'true'\n    gpus: two\n")
    r = capacity("matrix", str(p), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == f"capacity matrix: error: {p}:8: entries[1].gpus: must be an integer >= 1, got 'two'"
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_scenario_the_matrix_cannot_run_is_exit_2_before_anything_starts(tmp_path):
    marker = tmp_path / "started"
    entries = [{"name": "a", "command": f"touch {marker}"}]
    embedded = write_scenario(tmp_path, "emb", target={"url": "embedded"})
    r = capacity("matrix", str(write_matrix(tmp_path, entries, embedded)), timeout=60)
    assert r.returncode == 2 and "target.url is embedded" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    few = write_scenario(tmp_path, "few", target={"url": "http://127.0.0.1:9"}, corpus={"min_distinct": 100000})
    r = capacity("matrix", str(write_matrix(tmp_path, entries, few)), timeout=60)
    assert r.returncode == 2 and "corpus" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    keyed = write_scenario(tmp_path, "key", target={"url": "http://127.0.0.1:9", "api_key_env": "MATRIX_TEST_UNSET"})
    r = capacity("matrix", str(write_matrix(tmp_path, entries, keyed)), timeout=60)
    assert r.returncode == 2 and "MATRIX_TEST_UNSET" in r.stderr, r.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.slow  # the wrong-model entry reaches `capacity run`
def test_failing_entries_become_rows_with_their_reason_and_exit_1(tmp_path):
    sc = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9", "model": "sim-model"})
    token = "31.4159"  # a sleep nobody else runs: its process must be gone after the teardown
    torn = tmp_path / "torn-down"
    dead = free_port()
    entries = [
        {"name": "exits", "command": "echo 'cannot load the weights' >&2; exit 3"},
        {"name": "never-ready", "command": f"sleep {token}", "ready": {"timeout_s": 1},
         "teardown": f"echo {{port}} > {torn}"},
        {"name": "down", "url": f"http://127.0.0.1:{dead}", "ready": {"timeout_s": 1}},
        # ready (it lists its models) but serves another model: the runner's preflight refuses
        {"name": "wrong-model", "command": "capacity simulate --port {port} --model other-model"},
    ]
    r = capacity("matrix", str(write_matrix(tmp_path, entries, sc)), timeout=120)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    root = next((tmp_path / "out").iterdir())
    doc = json.loads((root / "matrix.json").read_text())
    rows = {row["name"]: row for row in doc["entries"]}
    assert list(rows) == ["exits", "never-ready", "down", "wrong-model"]  # every entry was tried, in order
    assert all(row["status"] == "failed" and row["rank"] is None for row in rows.values())
    assert rows["exits"]["stage"] == "ready"
    assert rows["exits"]["reason"] == ("command exited with code 3 before the server was ready: "
                                       "cannot load the weights (log: server.log)")
    assert (root / "exits" / "server.log").read_text().strip() == "cannot load the weights"
    assert rows["never-ready"]["reason"].startswith("not ready within 1 s: GET http://127.0.0.1:")
    port = int(torn.read_text())  # the teardown ran, with the entry's port
    assert f"127.0.0.1:{port}/v1/models" in rows["never-ready"]["reason"]
    assert processes_with(f"sleep {token}") == []  # and what the command started is stopped
    assert rows["down"]["reason"].startswith(f"not ready within 1 s: GET http://127.0.0.1:{dead}/v1/models: ")
    assert rows["wrong-model"]["stage"] == "run"
    assert "run failed: preflight: model 'sim-model' is not served" in rows["wrong-model"]["reason"]
    assert processes_with("--model other-model") == []
    assert doc["best"]["name"] is None and doc["failed"] == list(rows) and not doc["complete"]
    md = (root / "matrix.md").read_text()
    assert "no entry completed with a decision" in md and "cannot load the weights" in md
    assert (root / "matrix.html").exists() and (root / "matrix.yaml").exists()


def test_sigterm_tears_the_current_entry_down_and_skips_the_rest(tmp_path):
    sc = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9"})
    token = "27.1828"
    entries = [{"name": "waits", "command": f"sleep {token}", "ready": {"timeout_s": 60}},
               {"name": "later", "command": "true"}]
    proc = popen([*CAPACITY, "matrix", str(write_matrix(tmp_path, entries, sc))])
    assert proc.stdout is not None
    for line in proc.stdout:  # the command is running: the matrix waits for it to be ready
        if "waits: started" in line:
            break
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    doc = json.loads((next((tmp_path / "out").iterdir()) / "matrix.json").read_text())
    assert [(r["name"], r["status"], r["stage"]) for r in doc["entries"]] == [("waits", "interrupted", "ready"),
                                                                          ("later", "not run", None)]
    assert doc["entries"][0]["reason"] == "interrupted (SIGTERM)"
    assert processes_with(f"sleep {token}") == []


def test_the_readiness_check_sends_url_credentials_and_never_prints_them(tmp_path):
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from capacity_plugins.matrix.server import EntryFailed, Server
    from capacity_plugins.matrix.spec import Entry, Ready

    want = "Basic " + base64.b64encode(b"ops:s3cret-pass").decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.headers.get("Authorization") == want and self.path == "/v1/models" else 401)
            self.end_headers()

        def log_message(self, *_):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]

        def server(password: str) -> Server:
            entry = Entry(name="x", url=f"http://ops:{password}@127.0.0.1:{port}", command=None,
                          ready=Ready(None, 1.0), teardown=None, gpus=None, gpu_hour_usd=None)
            return Server(entry, tmp_path, None, {"X-Team": "a"}, insecure=False)

        assert server("s3cret-pass").wait_ready("/v1/models") == f"http://ops:s3cret-pass@127.0.0.1:{port}/v1/models"
        with pytest.raises(EntryFailed) as e:
            server("wrong-pass").wait_ready("/v1/models")
        assert str(e.value) == f"not ready within 1 s: GET http://127.0.0.1:{port}/v1/models: HTTP 401"
    finally:
        httpd.shutdown()


def test_a_server_that_echoes_the_api_key_does_not_put_it_in_the_table(tmp_path, monkeypatch):
    from capacity_plugins.contracts.redaction import REDACTED

    key = "sk-matrix-test-0123456789"
    monkeypatch.setenv("MATRIX_TEST_KEY", key)
    sc = write_scenario(tmp_path, target={"url": "http://127.0.0.1:9", "api_key_env": "MATRIX_TEST_KEY"})
    entries = [{"name": "leaky", "command": "echo \"bad key $MATRIX_TEST_KEY\" >&2; exit 1"}]
    r = capacity("matrix", str(write_matrix(tmp_path, entries, sc)), timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    root = next((tmp_path / "out").iterdir())
    for name, marker in (("matrix.json", REDACTED), ("matrix.md", REDACTED), ("matrix.html", "&lt;redacted&gt;")):
        text = (root / name).read_text()
        assert key not in text and f"bad key {marker}" in text, name
    assert (root / "leaky" / "server.log").read_text() == f"bad key {REDACTED}\n"
