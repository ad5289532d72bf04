"""Fixtures and helpers of the fault suite (tests/test_faults*.py): the hostile server
(tests/fault_server.py) in its own process, the run's secrets, and the checks every fault case
shares (no secret value anywhere, records against the requests the server saw)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CAPACITY = [sys.executable, "-m", "capacity_plugins"]
LOCUST = [sys.executable, "-m", "locust"]

# The generator's whole-request timeout in the fault cases (request.timeout_s / --request-timeout),
# and how much later than it a request may end ("ended in time").
TIMEOUT_S = 2.0
GRACE_S = 2.0


class FaultServer:
    """tests/fault_server.py in a child process; `seen()` is what it has read, per mode."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(TESTS / "fault_server.py"), "0", "--exit-on-stdin-eof"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"fault server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def seen(self) -> Counter[str]:
        with urllib.request.urlopen(self.url + "/_faults/seen", timeout=10) as r:  # noqa: S310 - loopback
            return Counter(json.loads(r.read()))

    def flooded(self, mode: str, wait_s: float = 10.0) -> int:
        """Bytes the client took from the most recent endless stream of `mode` (waits for its end)."""
        deadline = time.monotonic() + wait_s
        while True:
            with urllib.request.urlopen(self.url + "/_faults/flooded", timeout=10) as r:  # noqa: S310 - loopback
                value = json.loads(r.read()).get(mode)
            if value is not None:
                return int(value)
            if time.monotonic() > deadline:
                raise AssertionError(f"the {mode} stream never ended: the client is still taking it")
            time.sleep(0.05)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(scope="session")
def fault_server() -> Iterator[FaultServer]:
    """One hostile server for the session (tests compare `seen()` before and after)."""
    srv = FaultServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fresh_fault_server() -> Iterator[FaultServer]:
    """A hostile server of the test's own: its counts are this test's requests only."""
    srv = FaultServer()
    try:
        yield srv
    finally:
        srv.stop()


# -- secrets -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultSecrets:
    """The credentials a fault run carries, each at least 6 characters (docs/secrets.md)."""

    api_key: str = "sk-fault-APIKEY-7f3a9c21"          # from FAULT_API_KEY (target.api_key_env)
    gateway_key: str = "gw-fault-GWKEY-51be02d4"       # X-Gateway-Key: ${GATEWAY_KEY}
    # a header whose *name* says nothing (X-Route): a secret only because its value is that of a
    # credential-named variable, ROUTE_SECRET (docs/secrets.md)
    route_token: str = "rt-fault-ROUTE-3c8e41f0"
    user: str = "alice"
    password: str = "pw-fault-PASS-9d2e7163"           # http://alice:PASS@host

    @property
    def basic_token(self) -> str:
        return base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

    def values(self) -> tuple[str, ...]:
        """Every value that must never be written or printed."""
        return (self.api_key, self.gateway_key, self.route_token, self.password, self.basic_token)

    def env(self) -> dict[str, str]:
        return {"FAULT_API_KEY": self.api_key, "GATEWAY_KEY": self.gateway_key, "ROUTE_SECRET": self.route_token}

    def header_args(self) -> list[str]:
        """The extra headers as --header values (plain Locust / an in-process user)."""
        return [f"X-Gateway-Key: {self.gateway_key}", f"X-Route: {self.route_token}"]

    def url(self, base: str) -> str:
        return base.replace("://", f"://{self.user}:{self.password}@", 1)


@pytest.fixture
def fault_secrets(monkeypatch: pytest.MonkeyPatch) -> FaultSecrets:
    s = FaultSecrets()
    for name, value in s.env().items():
        monkeypatch.setenv(name, value)
    return s


# A secret's first characters alone are a leak too (a key cut in half by a length limit).
FRAGMENT_CHARS = 10


def secrets_in(texts: Iterable[tuple[str, bytes | str]], secrets: FaultSecrets) -> list[str]:
    """'where: which' for every secret value, or its first FRAGMENT_CHARS characters, found in
    (where, content) pairs."""
    found = []
    for where, content in texts:
        data = content.encode() if isinstance(content, str) else content
        for value in secrets.values():
            if value[:FRAGMENT_CHARS].encode() in data:
                found.append(f"{where}: {value}" + ("" if value.encode() in data else f" (its first {FRAGMENT_CHARS} characters)"))
    return found


def folder_files(folder: Path) -> list[tuple[str, bytes]]:
    """Every file under a results folder, as (relative path, bytes)."""
    return [(str(p.relative_to(folder)), p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()]


# -- corpora, scenarios, processes ---------------------------------------------------------------------


def write_fault_corpus(path: Path, modes: Iterable[str], per_mode: int) -> Path:
    """A JSONL corpus whose prompts select the server's modes: id `<mode>-<n>`, prompt `FAULT:<mode> …`,
    the modes taking turns (read `sequential`, every mode comes up within the first len(modes))."""
    modes = list(modes)
    with path.open("w") as f:
        for i in range(per_mode):
            for mode in modes:
                f.write(json.dumps({"id": f"{mode}-{i}", "prompt": f"FAULT:{mode} request {i}: say something"}) + "\n")
    return path


def mode_of(record: dict[str, Any]) -> str:
    return str(record["prompt_id"]).rsplit("-", 1)[0]


def write_scenario(tmp_path: Path, name: str, **sections: Any) -> Path:
    data: dict[str, Any] = {"name": name, "output": str(tmp_path / "results"), "corpus": {"min_distinct": 10}}
    data.update(sections)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def read_records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def results_folder(console: str) -> Path:
    """The folder `capacity run` printed last ('[capacity] results: PATH')."""
    for line in reversed(console.splitlines()):
        if line.startswith("[capacity] results: "):
            return Path(line.split(": ", 1)[1].split(" (")[0])
    raise AssertionError(f"no results line in the console:\n{console[-3000:]}")


# -- an LLMUser in this process (as tests/test_users.py builds one) ------------------------------------


def local_user(host: str, results: Path, corpus: Path, **opts: Any) -> tuple[Any, Any, Any]:
    """(environment, RunContext, user) for one in-process LLMUser against `host` (userinfo allowed)."""
    from locust.env import Environment
    from locust.event import Events

    from capacity_plugins.contracts.redaction import strip_userinfo
    from capacity_plugins.load import plugin
    from capacity_plugins.load.users import LLMUser

    ns = argparse.Namespace(
        dialect="openai-chat", model="fault-model", corpus=str(corpus), min_distinct=1, max_tokens=16,
        results_dir=str(results), no_stream=False, request_timeout=TIMEOUT_S, retries=0,
        header=[], api_key_env="", insecure=False, sampling="sequential", seed=0,
    )
    for k, v in opts.items():
        setattr(ns, k, v)
    user_class = type("FaultUser", (LLMUser,), {"host": strip_userinfo(host), "abstract": False})
    env = Environment(user_classes=[user_class], events=Events(), host=host, parsed_options=ns)
    env.create_local_runner()
    ctx = plugin.register(env)
    ctx.sampler = ctx.corpus.sampler("sequential", 0, 0, 1)
    return env, ctx, user_class(env)
