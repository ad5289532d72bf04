"""`capacity trace from-records` and `from-log`: what a team records becomes a trace `load.kind: trace`
replays (read back with the same reader the replay uses)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.processes import capacity

from capacity_plugins.corpus.trace import read_trace


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _record(at: float, **kw) -> dict:
    rec = {"scheduled_unix": None, "sent_unix": at, "attempt": 1, "ok": True, "error_kind": None,
           "prompt_tokens": 700, "output_tokens": 20, "max_tokens": 64, "prompt_id": "p1", "workload": None}
    rec.update(kw)
    return rec


def test_from_records_keeps_arrivals_lengths_and_repeated_prompts(tmp_path):
    _jsonl(tmp_path / "requests.jsonl", [
        _record(1000.0, scheduled_unix=999.5),  # open loop: the scheduled time is the arrival
        _record(1000.25, prompt_id="p2", prompt_tokens=100, output_tokens=7, workload="chat"),
        _record(1000.5),  # p1 again: the same hash_ids
        _record(1000.5, attempt=2),  # a retry: not a new request
        _record(1001.0, ok=False, error_kind="timeout", output_tokens=None),  # failed: asked for max_tokens
        _record(1002.0, prompt_tokens=None),  # no server count: left out
    ])
    r = capacity("trace", "from-records", str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "4 requests; 1 left out" in r.stdout
    rows = read_trace(tmp_path / "trace.jsonl")
    assert [x.timestamp_ms for x in rows] == [0.0, 750.0, 1000.0, 1500.0]
    assert [x.output_length for x in rows] == [20, 7, 20, 64]
    assert rows[0].hash_ids == rows[2].hash_ids == (0, 1) and rows[1].hash_ids == (2,)
    assert rows[1].cls == "chat" and rows[0].cls is None


def test_from_log_hashes_shared_prefixes_without_copying_text(tmp_path):
    system = "You are a helpful assistant. " * 200  # ≈ 1450 tokens: two full 512-token blocks
    log = _jsonl(tmp_path / "access.jsonl", [
        {"timestamp": "2026-01-01T00:00:00Z", "request": {"messages": [{"role": "system", "content": system},
                                                                       {"role": "user", "content": "a" * 900}]},
         "response": {"usage": {"prompt_tokens": 1700, "completion_tokens": 33}}, "user": "u1"},
        {"timestamp": "2026-01-01T00:00:02.5Z", "request": {"messages": [{"role": "system", "content": system},
                                                                         {"role": "user", "content": "b" * 900}]},
         "usage": {"prompt_tokens": 1701, "completion_tokens": 12}},
        {"created": 1767225601, "body": {"prompt": "short one", "max_tokens": 9}},
    ])
    out = tmp_path / "t.jsonl"
    r = capacity("trace", "from-log", str(log), "-o", str(out), timeout=60)
    assert r.returncode == 0, r.stderr
    rows = read_trace(out)
    assert [x.timestamp_ms for x in rows] == [0.0, 1000.0, 2500.0]
    a, c, b = rows
    assert a.hash_ids[:2] == b.hash_ids[:2] and a.hash_ids[2:] != b.hash_ids[2:]  # the shared system prompt
    assert (a.input_length, a.output_length, a.session_id) == (1700, 33, "u1")
    assert c.output_length == 9 and c.input_length == 3  # no usage: counted from the text, max_tokens asked
    assert "helpful" not in out.read_text()  # hashes, not the users' text


def test_from_log_bad_line_names_line_and_field_or_is_skipped(tmp_path):
    log = _jsonl(tmp_path / "access.jsonl", [
        {"time": 1767225600.0, "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
        {"time": 1767225601.0, "usage": {"completion_tokens": 3}},
    ])
    r = capacity("trace", "from-log", str(log), timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"{log}:2: usage.prompt_tokens: missing (and no prompt text to count)")
    r = capacity("trace", "from-log", str(log), "--skip-bad", timeout=60)
    assert r.returncode == 0 and "1 requests; 1 left out" in r.stdout
