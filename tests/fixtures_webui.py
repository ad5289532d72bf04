"""Helpers for the live-view tests: real `locust` processes against the simulator, HTTP polling.

Import what you need (`from fixtures_webui import ...`); the pytest fixtures here are plain
module fixtures, so importing them into a test module makes them available there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from locust_runs import LOCUST, LOCUSTFILE, ROOT, env_with

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.launch import SimulatorProcess

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    """A simulator whose TTFT grows with load (small batch, noticeable decode step)."""
    with SimulatorProcess(SimConfig(max_num_seqs=4, decode_base_ms=6.0, decode_per_seq_ms=2.0)) as s:
        yield s


def llm_args(url: str, results: Path, *, model: str = "sim-model") -> list[str]:
    return ["--host", url, "--model", model, "--max-tokens", "16",
            "--corpus", "synthetic:prompt_tokens=40,output_tokens=16,n=1500", "--results-dir", str(results)]


class LocustProc:
    """A `locust -f locustfiles/llm.py ...` child with its output in a log file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen([LOCUST, "-f", LOCUSTFILE, *args], cwd=ROOT, env=env or env_with(),
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C (Locust's clean shutdown: stop users, write files) and wait."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def locust_procs() -> Iterator[Callable[..., LocustProc]]:
    started: list[LocustProc] = []

    def start(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> LocustProc:
        p = LocustProc(args, log_path, env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def http_post(url: str, data: dict[str, Any] | None = None, timeout: float = 10) -> tuple[int, bytes]:
    import urllib.parse

    body = urllib.parse.urlencode(data or {}).encode()
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str, timeout: float = 5) -> Any:
    status, body, _ = http_get(url, timeout)
    assert status == 200, (url, status, body[:500])
    return json.loads(body)


def wait_until(fn: Callable[[], Any], timeout: float, what: str, proc: LocustProc | None = None,
               interval: float = 0.25) -> Any:
    """Poll fn() until it returns something truthy; fail with the process log on timeout."""
    deadline = time.time() + timeout
    last_exc: BaseException | None = None
    while time.time() < deadline:
        if proc is not None and proc.proc.poll() is not None:
            pytest.fail(f"locust exited ({proc.proc.returncode}) while waiting for {what}:\n{proc.log()[-3000:]}")
        try:
            value = fn()
            if value:
                return value
        except (OSError, AssertionError, ValueError, KeyError) as e:
            last_exc = e
        time.sleep(interval)
    tail = proc.log()[-3000:] if proc is not None else ""
    pytest.fail(f"timed out waiting for {what} (last error: {last_exc!r})\n{tail}")


def aggregated(doc: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in doc["rows"] if r["name"] == "Aggregated")


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def records_by_worker(path: Path, finished_only: bool = False) -> dict[int, int]:
    """Records per worker; `finished_only` leaves out requests cancelled by a stop (which the live
    statistics do not count)."""
    out: dict[int, int] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            rec = json.loads(line)
            if finished_only and rec.get("error_kind") == "cancelled":
                continue
            w = int(rec["worker"])
            out[w] = out.get(w, 0) + 1
    return out
