"""`capacity run --web`: Ctrl-C ends the session (docs/running.md). A test that had finished stays
complete — its meta.json, and `capacity analyze` of its folder — while a test still running when
Ctrl-C comes is marked incomplete (issue 25, observation 8: the supervisor rewrote the finished
test's meta.json to `complete: false, interrupted`, and `capacity analyze` then exited 1)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers.ports import free_port
from helpers.processes import CAPACITY, LoggedProcess, capacity
from helpers.results import read_meta, read_steps
from helpers.scenarios import write_scenario
from helpers.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.background]  # waits on its processes, asserts no timing: beside the measured tests (tests/README.md)


class _Session(LoggedProcess):
    """`capacity run --web` in its own process group (a terminal's Ctrl-C goes to the group), its
    output in a log file readable while it runs (helpers.waiting.Watched)."""

    def __init__(self, tmp_path: Path, scenario: Path) -> None:
        self.port = free_port()
        super().__init__([*CAPACITY, "run", str(scenario), "--web", "--web-port", str(self.port)],
                         tmp_path / "session.log", group=True)

    def lines(self, prefix: str) -> list[str]:
        return [ln.strip() for ln in self.log().splitlines() if ln.startswith(prefix)]

    def start_test(self, sim_url: str) -> None:
        """The UI's Start button (the scenario drives the load; the form's numbers are not used)."""
        body = urllib.parse.urlencode({"user_count": 1, "spawn_rate": 1, "host": sim_url}).encode()

        def post() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/swarm", data=body, timeout=5) as r:
                return bool(json.loads(r.read())["success"])

        wait_until(post, 60, "the web UI to start a test", self)


def _analysed_folder(line: str) -> Path:
    # "[capacity] analysed: PATH/report.html", or on a busy host "analysed, no decision: PATH (why)"
    return Path(line.split(": ", 1)[1].split(" (", 1)[0]).parent


def test_ctrl_c_after_a_finished_web_test_leaves_it_complete_and_a_running_one_incomplete(tmp_path):
    sc = write_scenario(
        tmp_path, "web", target={"url": "embedded"}, request={"max_tokens": 8, "timeout_s": 10},
        # background: at nice 19 beside the measured tests, so the generator's own limit is loose
        # (its validity is tested in test_starvation.py)
        load={"kind": "concurrency_sweep", "levels": [1, 2], "step_s": 4, "warmup_s": 1, "max_loop_lag_p99_ms": 500},
    )
    session = _Session(tmp_path, sc)
    results = tmp_path / "results"
    try:
        sim_url = wait_until(lambda: session.lines("[capacity] embedded simulator at "), 90,
                             "the simulator", session)[0].rsplit(" ", 1)[1]
        wait_until(lambda: session.lines("[capacity] web UI at "), 90, "the web UI", session)
        session.start_test(sim_url)
        # The first test runs to its end and is analysed (the report exists): it is finished.
        finished = _analysed_folder(wait_until(lambda: session.lines("[capacity] analysed"), 120,
                                               "the first test's analysis", session)[0])
        assert read_meta(finished)["complete"] is True
        # A second test from the UI (its own folder): Ctrl-C comes while it still runs.
        session.start_test(sim_url)

        def running() -> Path | None:
            fresh = [f for f in results.iterdir()
                     if f.is_dir() and f != finished and (f / "requests.jsonl").stat().st_size > 0]
            return fresh[0] if fresh else None

        interrupted = wait_until(running, 90, "the second test's first records", session)
        assert len(session.lines("[capacity] analysed")) == 1, "the second test ended before Ctrl-C"
        rc = session.interrupt(timeout=90)
        console = session.log()
    finally:
        session.close()
    assert rc == 0, console[-3000:]  # Ctrl-C is how a web session ends
    assert "Traceback" not in console, console[-3000:]

    meta = read_meta(finished)
    assert meta["complete"] is True and "incomplete_reason" not in meta, meta
    r = capacity("analyze", str(finished), timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "incomplete" not in r.stderr, r.stderr

    meta = read_meta(interrupted)
    assert meta["complete"] is False and "interrupted" in meta["incomplete_reason"], meta
    assert any(s["interrupted"] for s in read_steps(interrupted))
    r = capacity("analyze", str(interrupted), timeout=180)
    assert r.returncode == 1 and "the run is incomplete" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
