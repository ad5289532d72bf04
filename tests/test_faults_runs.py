"""The fault table under real processes: every mode mixed in one `capacity run` (one Locust
process, a corpus whose prompts select the modes), a dead server, and the signals that stop a
run, with one process and with `--processes 2`.

What each run must show: records == the requests the server read (up to the requests the stop
cancelled), every record's kind the documented one for its mode, no request longer than the
timeout plus a grace, no secret value in any file of the results folder or on the console, no
traceback, no load left behind, and an exit code from docs/exit-codes.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers.binaries import IN_CI
from helpers.fault_server import MODES, SLOW
from helpers.faults import (
    GRACE_S,
    TIMEOUT_S,
    FaultSecrets,
    FaultServer,
    folder_files,
    mode_of,
    secrets_in,
    write_fault_corpus,
)
from helpers.ports import free_port
from helpers.processes import CAPACITY, LOCUST, env_with, popen, processes_with, run
from helpers.results import read_meta, read_records, read_steps, results_dir
from helpers.scenarios import write_scenario
from helpers.waiting import wait_until

from capacity_plugins.contracts.redaction import REDACTED

pytestmark = pytest.mark.slow

# docs/exit-codes.md, `capacity run`: every exit this suite sees must be one of these.
EXIT_CODES = {0: "done", 1: "run could not be completed", 2: "bad input", 3: "gate failed", 130: "Ctrl-C",
              143: "SIGTERM"}
# Left out of the mixed run while they are findings (tests/test_faults_requests.py FINDINGS): an
# endless event holds hundreds of MB in the Locust process until its timeout, and the echoes across
# the 300-character cut leak a key fragment into requests.jsonl. Put them back when fixed.
NOT_MIXED = {"endless_event", "echo_401_at_cut", "echo_stream_error_at_cut"}
MIXED = [m for m in MODES if m not in NOT_MIXED]
MIXED_TIMEOUT_S = 3.0
# Eight users share one process with the floods, on a CI host shared with other jobs: the modes
# that move megabytes may then legitimately end as `timeout` (the endless line not yet at 16 MiB,
# the 8 MB line not yet read) — but only once the timeout really passed. Alone, each mode's exact
# kind is pinned by tests/test_faults_requests.py.
BULKY = {"endless_line", "line_8mb"}


def _env(secrets: FaultSecrets) -> dict[str, str]:
    return env_with(**secrets.env())


def _no_leaks(folder: Path | None, console: str, secrets: FaultSecrets) -> None:
    texts = [("console", console)] + (folder_files(folder) if folder is not None and folder.exists() else [])
    leaks = secrets_in(texts, secrets)
    assert not leaks, leaks


def _assert_no_traceback(console: str) -> None:
    lines = console.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    assert not starts, "\n".join(lines[starts[0]:starts[0] + 40])


def _check_records_against_server(records: list[dict], seen: Counter[str], modes: list[str]) -> None:
    """Per mode: every request the server read is a record; a record the server never read can
    only be one cancelled by the stop before it was sent."""
    by_mode = Counter(mode_of(r) for r in records)
    cancelled = Counter(mode_of(r) for r in records if r["error_kind"] == "cancelled")
    for mode in modes:
        assert seen[mode] <= by_mode[mode] <= seen[mode] + cancelled[mode], (
            f"{mode}: server read {seen[mode]} requests, {by_mode[mode]} records ({cancelled[mode]} cancelled)")
    assert set(by_mode) <= set(modes), set(by_mode) - set(modes)


# -- every mode in one run -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """One `capacity run` of 8 users for 12 s against a corpus that cycles through every mode."""
    tmp = tmp_path_factory.mktemp("mixed")
    secrets = FaultSecrets()
    with FaultServer() as server:
        corpus = write_fault_corpus(tmp / "faults.jsonl", MIXED, per_mode=40)
        sc = write_scenario(
            tmp, "mixed", target=secrets.target(server.url),
            corpus={"path": str(corpus), "min_distinct": 10, "sampling": "sequential"},  # modes in turn
            request={"timeout_s": MIXED_TIMEOUT_S, "max_tokens": 16, "retries": 0},
            load={"kind": "concurrency_sweep", "levels": [8], "step_s": 12, "warmup_s": 1, "min_requests": 10,
                  "max_step_s": 12},
            # a scrape target with user:password that answers 404: its URL lands in the gap list
            telemetry={"scrape": [secrets.url(server.url) + "/metrics"], "nvml": False},
        )
        p = run([*CAPACITY, "run", str(sc)], env=_env(secrets), timeout=240)
        console = p.stdout + p.stderr
        yield {"proc": p, "console": console, "folder": results_dir(p.stdout), "seen": server.seen_after_exit(),
               "secrets": secrets, "tmp": tmp}


def test_mixed_run_exit_and_console(mixed_run):
    p, console = mixed_run["proc"], mixed_run["console"]
    assert p.returncode in EXIT_CODES, console[-3000:]
    _assert_no_traceback(console)
    steps = read_steps(mixed_run["folder"])
    # failed requests are data: the run itself completed (docs/exit-codes.md) — unless its step is
    # invalid (the not_http replies make the generator back off, the floods can starve its loop on
    # a loaded host): then 1, "no valid step left"
    valid = any(not s["client_limited"] for s in steps)
    assert p.returncode == (0 if valid else 1), console[-3000:]
    _no_leaks(mixed_run["folder"], console, mixed_run["secrets"])
    # Locust's own files and console name failures by kind only, never by the server's text
    # (docs/secrets.md); the records keep the text, scrubbed
    server_texts = ("fault server", "SSH-2.0", "Bad Gateway", "is not valid here")
    for name in ("locust_failures.csv", "locust_report.html", "locust_stats.csv", "locust_exceptions.csv"):
        text = (mixed_run["folder"] / name).read_text()
        assert not [t for t in server_texts if t in text], name
    assert not [t for t in server_texts if t in console], console[-3000:]
    failures = (mixed_run["folder"] / "locust_failures.csv").read_text()
    assert "LLMRequestError('protocol')" in failures and "LLMRequestError('http_5xx (HTTP 503)')" in failures


def test_mixed_run_records_match_what_the_server_read(mixed_run):
    folder, seen = mixed_run["folder"], mixed_run["seen"]
    records = read_records(folder)
    _check_records_against_server(records, seen, MIXED)
    assert all(seen[m] >= 1 for m in MIXED), {m: seen[m] for m in MIXED}  # every mode was exercised
    meta = read_meta(folder)
    assert meta["records"]["written"] == len(records) and meta["records"]["lost"] == 0, meta["records"]
    # the scrape target's failures were written (without its password: test_mixed_run_exit_and_console)
    assert meta["telemetry"]["gaps"], meta["telemetry"]


@pytest.mark.parametrize("mode", MIXED)
def test_mixed_run_mode(mixed_run, mode):
    records = [r for r in read_records(mixed_run["folder"]) if mode_of(r) == mode]
    expected = MODES[mode]
    assert records, f"no record of {mode}"
    judged = 0
    for r in records:
        if r["error_kind"] == "cancelled":
            continue
        assert r["e2e_ms"] <= (MIXED_TIMEOUT_S + GRACE_S) * 1000, f"{mode}: {r['e2e_ms']} ms"
        if r["error_kind"] == "timeout" and (mode in BULKY or expected.kind != "timeout"):
            # bulky modes may run out the clock; on a loaded host (a full suite) any answer may
            # come too late — then it must be a true timeout, not an early one
            assert r["e2e_ms"] >= MIXED_TIMEOUT_S * 1000 * 0.95, f"{mode}: a timeout after {r['e2e_ms']} ms"
            continue
        judged += 1
        assert (r["error_kind"], r["status"]) == (expected.kind, expected.status), r["error"]
        assert r["ok"] is (expected.kind is None)
        if mode in ("echo_401", "echo_stream_error"):
            assert REDACTED in r["error"], r["error"]
    assert judged or mode in BULKY, f"{mode}: every request timed out; its own answer was never seen"


# -- a dead server -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dead_run(tmp_path_factory):
    """`capacity run --skip-preflight` of 8 users for 8 s against a port where nothing listens."""
    tmp = tmp_path_factory.mktemp("dead")
    secrets = FaultSecrets()
    sc = write_scenario(
        tmp, "dead", target=secrets.target(f"http://127.0.0.1:{free_port()}"),
        request={"timeout_s": TIMEOUT_S, "max_tokens": 16},
        load={"kind": "concurrency_sweep", "levels": [8], "step_s": 8, "warmup_s": 1, "min_requests": 10,
              "max_step_s": 8},
    )
    p = run([*CAPACITY, "run", str(sc), "--skip-preflight"], env=_env(secrets), timeout=180)
    return {"proc": p, "console": p.stdout + p.stderr, "folder": results_dir(p.stdout), "secrets": secrets}


def test_dead_server_gives_bounded_records_and_flags_the_step(dead_run):
    """Connection refused for 8 s at 8 users: the generator backs off (a few records a second, not
    a tight loop of thousands), and the step says the load was not delivered as planned."""
    p, console, folder = dead_run["proc"], dead_run["console"], dead_run["folder"]
    assert p.returncode in EXIT_CODES, console[-3000:]
    _assert_no_traceback(console)
    records = read_records(folder)
    assert records and {r["error_kind"] for r in records} <= {"connect", "cancelled"}
    step = read_steps(folder)[0]
    span_s = step["drain_end_unix"] - step["start_unix"]
    # an unbounded loop makes thousands of records a second; the backoff (up to 5 s) a few
    assert len(records) <= 8 * (span_s / 2 + 2), f"{len(records)} records in {span_s:.1f} s"
    assert step["client_limited"] and "refused connections" in step["client_limited_reason"], step
    assert "not delivered as planned" in step["client_limited_reason"]
    _no_leaks(folder, console, dead_run["secrets"])


def test_dead_server_run_with_no_valid_step_exits_1(dead_run):
    """docs/exit-codes.md: 1 when no valid step is left (a finding here until `capacity run` exited
    by the analysis' outcome: it exited 0)."""
    steps = read_steps(dead_run["folder"])
    assert not any(not s["client_limited"] for s in steps)  # nothing valid was measured
    assert dead_run["proc"].returncode == 1, dead_run["console"][-2000:]


def test_dead_server_fails_the_preflight(tmp_path):
    secrets = FaultSecrets()
    port = free_port()
    sc = write_scenario(tmp_path, "deadpf", target=secrets.target(f"http://127.0.0.1:{port}"))
    p = run([*CAPACITY, "run", str(sc)], env=_env(secrets), timeout=60)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"http://127.0.0.1:{port}" in p.stderr and "does not answer" in p.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("requests.jsonl"))
    _no_leaks(None, p.stdout + p.stderr, secrets)


@pytest.mark.parametrize("mode", [
    "echo_401",
    "echo_401_at_cut_200",
])
def test_a_preflight_answered_with_the_credentials_echoed(tmp_path, fault_server, mode):
    """The preflight's test request meets a server that echoes the credentials into its 401: exit 1,
    one line naming the status, no secret value (nor its first characters) on the console."""
    secrets = FaultSecrets()
    target = secrets.target(fault_server.url) | {"model": f"FAULT:{mode}"}
    sc = write_scenario(tmp_path, "echo", target=target)
    p = run([*CAPACITY, "run", str(sc)], env=_env(secrets), timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "answered HTTP 401" in p.stderr
    _no_leaks(None, p.stdout + p.stderr, secrets)


# -- signals, binding, nothing left behind -------------------------------------------------------------


def _listening(procs: list[psutil.Process]) -> list[tuple[int, str, int]]:
    out = []
    for proc in procs:
        try:
            for c in proc.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.append((proc.pid, c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


class _Console:
    """A process's text output, read by a thread as it comes (a pipe nobody reads could fill and
    stall the run); `text()` so far, `ended(timeout)` once every holder of the pipe has exited."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def has(self, prefix: str) -> bool:
        return any(line.startswith(prefix) for line in self.lines)

    def ended(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # helpers.waiting.Watched: a wait fails at once, with the output, if `capacity run` exits
    def died(self) -> str | None:
        if self.proc.poll() is None:
            return None
        self.ended(10)
        return f"`capacity run` exited {self.proc.returncode}:\n{self.text()[-4000:]}"

    def tail(self) -> str:
        return self.text()[-4000:]


def _start_slow_run(tmp_path: Path, server, secrets: FaultSecrets, *extra: str):
    """`capacity run` (in its own process group) of 4 users on 2 s streams, returned once the
    step runs and requests are in flight: (process, its console, the process tree)."""
    corpus = write_fault_corpus(tmp_path / "slow.jsonl", [SLOW.name], per_mode=200)
    sc = write_scenario(
        tmp_path, "stopped", target=secrets.target(server.url),
        corpus={"path": str(corpus), "min_distinct": 10},
        request={"timeout_s": 30, "max_tokens": 16},
        load={"kind": "concurrency_sweep", "levels": [4], "step_s": 300, "warmup_s": 1},
    )
    p = popen([*CAPACITY, "run", str(sc), *extra], env=_env(secrets), process_group=0)
    console = _Console(p)
    # generous bounds: they only stop a wait for a run that went wrong (a loaded host is slow)
    wait_until(lambda: console.has("[capacity] step 1/1"), 180, "the step to start", console)
    # requests in flight: 4 users on 2 s streams, each starting the next at once
    wait_until(lambda: server.seen()[SLOW.name] >= 4, 120, "4 slow requests read by the server", console)
    tree = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
    return p, console, tree


def _check_stopped_cleanly(folder: Path, server, tmp_path: Path, tree: list[psutil.Process], workers: int,
                          stopped_unix: float) -> None:
    """Nothing left running, no request after it, every request read is a record, nobody lost by
    the stop (sent at `stopped_unix`)."""
    _gone, alive = psutil.wait_procs(tree, timeout=60)
    assert not alive and not processes_with(str(tmp_path)), alive
    final = server.seen_after_exit()
    time.sleep(1.5)
    assert server.seen() == final, "requests arrived after every process of the run had exited"
    records = read_records(folder)
    _check_records_against_server(records, final, [SLOW.name])
    kinds = Counter(r["error_kind"] for r in records)
    assert set(kinds) <= {None, "cancelled"}, kinds
    assert kinds["cancelled"] >= 1, kinds  # the stop found requests in flight, and recorded them
    meta = read_meta(folder)
    assert meta["complete"] is False and meta["incomplete_reason"], meta.get("incomplete_reason")
    lost = meta.get("workers_lost") or []
    if lost and all(w["lost_unix"] < stopped_unix for w in lost):
        # A host so busy that a worker sent no heartbeat for the master's 10 s while the test ran:
        # lost before the stop, and reported as it should be (test_swarm_loaded.py holds the swarm on
        # a loaded host); what the stop does to a healthy swarm cannot be seen in this run. In CI
        # nothing else loads the host, so there it is a failure, not a skip.
        msg = f"a worker was lost before the stop (host starved it): {lost}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    assert not lost, lost
    assert meta["records"]["lost"] == 0 and meta["records"]["written"] == len(records), meta["records"]
    assert meta["workers"]["count"] == workers, meta["workers"]
    steps = read_steps(folder)
    assert steps[0]["interrupted"] and not steps[0]["membership_changed"], steps[0]


# `capacity run` turns either signal into one SIGINT to its Locust child (runner/child.py), so the
# Locust side of a stop is the same for both: two runs cover both signals and both layouts.
@pytest.mark.parametrize(("signum", "layout"), [(signal.SIGTERM, ["--processes", "2"]), (signal.SIGINT, [])],
                         ids=["SIGTERM-processes", "SIGINT-local"])
def test_a_signal_stops_the_run_cleanly(tmp_path, fresh_fault_server, signum, layout):
    """SIGTERM (CI, Kubernetes) to `capacity run`, or Ctrl-C (SIGINT to its process group, as a
    terminal sends it): a clean stop, in-flight requests recorded as cancelled, no worker lost, no
    traceback, exit 143 / 130, and no load after it (--processes: the swarm listens on loopback)."""
    secrets = FaultSecrets()
    exporter = free_port()
    p, out, tree = _start_slow_run(tmp_path, fresh_fault_server, secrets, *layout, "--exporter-port", str(exporter))
    try:
        listening = _listening(tree)
        stopped_unix = time.time()
        if signum == signal.SIGINT:
            os.killpg(p.pid, signal.SIGINT)  # a terminal's Ctrl-C: the foreground group
        else:
            p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        assert out.ended(60), out.tail()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    console = out.text()
    assert p.returncode == 128 + int(signum) and p.returncode in EXIT_CODES, (p.returncode, console[-4000:])
    _assert_no_traceback(console)
    # the swarm and the exporter listened on loopback only
    assert any(port == exporter for _pid, _ip, port in listening), listening
    if layout:
        assert len(listening) >= 2, listening  # the master's port and the exporter
    assert all(ip in ("127.0.0.1", "::1") for _pid, ip, _port in listening), listening
    folder = results_dir(console)
    _check_stopped_cleanly(folder, fresh_fault_server, tmp_path, tree, workers=2 if layout else 1,
                           stopped_unix=stopped_unix)
    assert "interrupted" in read_meta(folder)["incomplete_reason"]
    _no_leaks(folder, console, secrets)


def test_kill_9_of_capacity_run_still_ends_the_load_cleanly(tmp_path, fresh_fault_server):
    """tests/test_run_supervision.py checks that no process outlives a `kill -9` of `capacity run`
    (within 90 s); this checks how the orphaned swarm ends (docs/running.md: it "stops the same
    clean way, and tells its own workers to quit"): promptly, no traceback, every request the
    server read a record, those in flight cancelled, no worker lost, nothing sent afterwards.

    The orphan used to get SIGTERM from the kernel and again from its supervisor watchdog, and a
    second SIGTERM thrown into the clean stop broke it (a traceback, no meta.json, workers left
    running). Now the watchdog stays silent where the kernel signals (swarm/supervisor.py) and a
    SIGTERM during a stop is ignored (swarm/signals.py); the test sends a second one itself 0.3 s
    later, so a pair that does not coalesce (an orchestrator's SIGTERM too) is always exercised."""
    secrets = FaultSecrets()
    p, out, tree = _start_slow_run(tmp_path, fresh_fault_server, secrets, "--processes", "2")
    master = tree[1]
    try:
        stopped_unix = time.time()
        p.kill()
        time.sleep(0.3)
        with contextlib.suppress(psutil.NoSuchProcess):
            master.send_signal(signal.SIGTERM)
        # the pipe stays open until the orphans exit: a clean stop takes a few seconds (a loaded host
        # more); workers left behind would hold it ~60 s, until their heartbeat timeout
        p.wait(10)
        assert out.ended(40), f"the orphans still hold the console after 40 s:\n{out.tail()}"
    finally:
        for pid in processes_with(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    console = out.text()
    assert p.returncode == -signal.SIGKILL
    _assert_no_traceback(console)
    folder = Path(next(line for line in out.lines if line.startswith("[capacity] results → ")).split(" → ", 1)[1].strip())
    _check_stopped_cleanly(folder, fresh_fault_server, tmp_path, tree[1:], workers=2, stopped_unix=stopped_unix)
    _no_leaks(folder, console, secrets)


SLOW_QUIT_LOCUSTFILE = '''
import time

from locust import events

from capacity_plugins.locustfile import *  # noqa: F403 - the package's user and install()


@events.quit.add_listener
def _slow(**_):
    end = time.perf_counter() + 1.5  # a handler that holds the loop, as a loaded host can
    while time.perf_counter() < end:
        pass
'''


def test_locust_csv_writer_is_stopped_before_its_files_close(tmp_path, fresh_fault_server):
    """A stop with `--processes 2` and Locust's CSV files (as `capacity run` always writes them) is
    clean however long the last handlers take. Locust closes its CSV files without stopping the
    greenlet that rewrites them every second, and the master's exit lets the hub run once more; a
    `quit` handler that holds the loop 1.5 s makes that greenlet's next round certain to fall due
    (without load/locust_compat.stop_csv_writers: 'ValueError: I/O operation on closed file', every
    time). The files keep the run's rows."""
    locustfile = tmp_path / "slow_quit.py"
    locustfile.write_text(SLOW_QUIT_LOCUSTFILE)
    corpus = write_fault_corpus(tmp_path / "ok.jsonl", ["ok"], per_mode=50)
    sc = write_scenario(
        tmp_path, "csvrace", target={"url": fresh_fault_server.url, "model": "fault-model"},
        corpus={"path": str(corpus), "min_distinct": 10}, telemetry={"nvml": False},
        load={"levels": [2], "step_s": 3, "warmup_s": 0, "min_requests": 1, "max_step_s": 3},
    )
    p = run([*LOCUST, "-f", str(locustfile), "--scenario", str(sc), "--headless", "--only-summary",
             "--processes", "2", "--csv", str(tmp_path / "locust"), "--exit-code-on-error", "0"], timeout=120)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "Traceback" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    stats = (tmp_path / "locust_stats.csv").read_text()
    assert "Aggregated" in stats and "openai-chat" in stats, stats
