"""The fault table, one request at a time: an LLMUser in this process against every mode of the
hostile server (tests/helpers/fault_server.py).

The credentials: an API key (`--api-key-env`), `X-Gateway-Key` and `X-Route` headers whose values
are those of credential-named environment variables, and a password in the target URL.
For every mode: the request ends within the request timeout plus a grace, it is exactly one
record and one Locust event for exactly one request the server read, its `error_kind` and
status are the ones docs/results.md gives that failure, and no secret value reaches any file of
the results folder, the console or the log. The same table under a real Locust process, with
counts under concurrency, is tests/test_faults_runs.py.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import gevent
import pytest
from helpers.fault_server import MODES, REFUSED, Mode
from helpers.faults import GRACE_S, TIMEOUT_S, fault_user, folder_files, secrets_in
from helpers.ports import free_port
from helpers.results import read_records

from capacity_plugins.contracts.records import ERROR_KINDS
from capacity_plugins.contracts.redaction import REDACTED

# Findings: a case the product gets wrong today. Each test stays strict, so it fails the day the
# product is fixed and the mark must go.
FINDINGS: dict[str, str] = {}  # a mode whose behaviour is a known, unfixed finding: strict xfail with why
FLOODS = ("endless_line", "endless_event")  # endless streams the client must stop taking
MAX_TAKEN = 32 * 1024 * 1024  # the 16 MiB line limit, plus what the kernel's socket buffers hold


def _case(mode: Mode) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=FINDINGS[mode.name])] if mode.name in FINDINGS else []
    return pytest.param(mode, id=mode.name, marks=marks)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"say something {i}"}) + "\n" for i in range(20)))
    return path


def test_the_table_uses_the_documented_error_kinds():
    kinds = {m.kind for m in [*MODES.values(), REFUSED]} - {None}
    assert kinds <= set(ERROR_KINDS)
    # every kind a server can cause has a case (cancelled is the test's own doing: test_faults_runs.py)
    assert set(ERROR_KINDS) - kinds == {"cancelled"}


@pytest.mark.parametrize("mode", [_case(m) for m in [*MODES.values(), REFUSED]])
def test_one_request_per_mode(mode, fault_server, fault_secrets, corpus, tmp_path, capfd, caplog):
    base = fault_server.url if mode is not REFUSED else f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    local = fault_user(fault_secrets.url(base), tmp_path, corpus, model=f"FAULT:{mode.name}",
                       api_key_env="FAULT_API_KEY", headers=fault_secrets.header_args())
    before = fault_server.seen()

    t0 = time.monotonic()
    rec = local.call()
    elapsed = time.monotonic() - t0
    local.env.events.quitting.fire(environment=local.env)  # meta.json, llm_stats.csv, the records closed
    fired = local.fired

    # it ended in time, and a timeout is not declared early
    assert elapsed <= TIMEOUT_S + GRACE_S, f"{mode.name}: the request took {elapsed:.1f} s"
    assert rec.e2e_ms is not None and rec.e2e_ms <= (TIMEOUT_S + GRACE_S) * 1000
    if mode.kind == "timeout":
        assert rec.e2e_ms >= TIMEOUT_S * 1000 * 0.95
    # what happened, in the documented words
    assert (rec.error_kind, rec.status) == (mode.kind, mode.status), f"{mode.name}: {rec.error}"
    assert rec.ok is (mode.kind is None)
    assert (rec.error is None) is rec.ok
    if mode.name in FLOODS:
        assert 0 < fault_server.flooded(mode.name) <= MAX_TAKEN, "the client kept taking an endless stream"
    # one request read by the server = one record = one Locust event (a failure when not ok)
    seen = fault_server.seen() - before
    seen.pop("models", None)  # meta.json's server probe
    assert seen == (Counter() if mode is REFUSED else Counter({mode.name: 1}))
    records = read_records(out)
    assert [r["request_id"] for r in records] == [rec.request_id]
    assert records[0]["error_kind"] == mode.kind
    assert len(fired) == 1
    if mode.kind is None:
        assert fired[0]["exception"] is None
    else:
        # Locust groups failures by kind, never by the server's text
        assert str(fired[0]["exception"]) in (mode.kind, f"{mode.kind} (HTTP {mode.status})")
    # the server echoed the credentials: scrubbed, not cut away
    if mode.name in ("echo_401", "echo_stream_error"):
        assert REDACTED in rec.error, rec.error
    # no secret value anywhere: files, console, log
    console = capfd.readouterr()
    leaks = secrets_in([*folder_files(out), ("stdout", console.out), ("stderr", console.err),
                        ("log", caplog.text), ("record", repr(rec))], fault_secrets)
    assert not leaks, leaks
    assert {"requests.jsonl", "meta.json", "llm_stats.csv"} <= {name for name, _ in folder_files(out)}


@pytest.mark.parametrize("mode", ["echo_401", "echo_stream_error"])
def test_echoed_basic_credentials_are_scrubbed(mode, fault_server, fault_secrets, corpus, tmp_path, capfd, caplog):
    """Without an API key the URL's user:password is sent as Basic auth; a server that echoes it
    (token and decoded password) gets neither into a file, the console or the log."""
    out = tmp_path / "out"
    local = fault_user(fault_secrets.url(fault_server.url), tmp_path, corpus, model=f"FAULT:{mode}",
                       headers=fault_secrets.header_args())
    rec = local.call()
    local.env.events.quitting.fire(environment=local.env)
    assert rec.error_kind == MODES[mode].kind
    assert REDACTED in rec.error and "decoded: " in rec.error, rec.error  # both echoes arrived, scrubbed
    console = capfd.readouterr()
    leaks = secrets_in([*folder_files(out), ("stdout", console.out), ("stderr", console.err), ("log", caplog.text)],
                       fault_secrets)
    assert not leaks, leaks


# measured: it counts another greenlet's ticks in a fixed 0.3 s, which is CPU this process must get
# at that moment (11 of 20 beside the parallel phase under coverage)
@pytest.mark.measured
def test_a_flooding_stream_leaves_the_hub_to_the_other_users(fault_server, corpus, tmp_path):
    """A server that streams faster than it is read never makes a receive wait, so the reader
    must let the hub run by itself: while one user takes keep-alive lines until its timeout, a
    timer in this process still fires about every 10 ms. (A reader that yielded only after a
    receive it believed waited held this whole process for the full timeout: every other user's
    request then timed out unsent.)"""
    local = fault_user(fault_server.url, tmp_path, corpus, model="FAULT:keepalive_flood")
    ticks: list[float] = []

    def tick() -> None:
        while True:
            gevent.sleep(0.01)
            ticks.append(time.monotonic())

    ticker = gevent.spawn(tick)
    start = time.monotonic()
    try:
        rec = local.call()
    finally:
        ticker.kill()
        local.env.events.quitting.fire(environment=local.env)
    end = time.monotonic()
    assert rec.error_kind == "timeout", rec.error
    gaps = [b - a for a, b in zip([start, *ticks], [*ticks, end], strict=True)]
    # generous for a loaded host: ~200 ticks are possible; the old reader allowed none
    assert len(ticks) >= 20 and max(gaps) < TIMEOUT_S / 2, (len(ticks), max(gaps))


def test_retry_after_is_waited_before_the_retry(fault_server, corpus, tmp_path):
    """429 with `Retry-After: 2` and one retry: two attempts, the second sent about 2 s after the first."""
    out = tmp_path / "out"
    local = fault_user(fault_server.url, tmp_path, corpus, model="FAULT:http_429", retries=1)
    before = fault_server.seen()
    rec = local.call()
    local.env.events.quitting.fire(environment=local.env)
    records = read_records(out)
    assert [(r["attempt"], r["error_kind"]) for r in records] == [(1, "http_429"), (2, "http_429")]
    assert rec.attempt == 2 and len({r["prompt_id"] for r in records}) == 1
    gap = records[1]["sent_unix"] - records[0]["sent_unix"]
    assert 1.9 <= gap <= 2.0 + GRACE_S, f"the retry came {gap:.2f} s after the first attempt"
    assert (fault_server.seen() - before)["http_429"] == 2
