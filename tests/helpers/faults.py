"""The fault suite's shared pieces (tests/test_faults*.py): the hostile server (helpers/fault_server.py)
in its own process, the run's secrets, and the checks every fault case shares (no secret value
anywhere, records against the requests the server saw). Its fixtures are in fixtures/faults.py."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.servers import ServerProcess
from helpers.users import LocalUser, local_user
from helpers.waiting import wait_until

FAULT_SERVER = "helpers.fault_server"

# The generator's whole-request timeout in the fault cases (request.timeout_s / --timeout-s),
# and how much later than it a request may end and still count as ended by it. Every mode that
# would hang holds its connection for fault_server.HOLD_S (60 s): the grace tells "ended by the
# timeout" from "held until the server let go" with room for a loaded host.
TIMEOUT_S = 2.0
GRACE_S = 8.0


class FaultServer(ServerProcess):
    """helpers/fault_server.py in a child process (exits with this one); `seen()` is what it has read, per mode."""

    def __init__(self) -> None:
        super().__init__(FAULT_SERVER, "0", "--exit-on-stdin-eof", hold_stdin=True)

    def _get(self, route: str) -> Any:
        with urllib.request.urlopen(self.url + route, timeout=10) as r:
            return json.loads(r.read())

    def seen(self) -> Counter[str]:
        return Counter(self._get("/_faults/seen"))

    def seen_after_exit(self, wait_s: float = 30.0) -> Counter[str]:
        """What it read once the client has exited: first waits until every connection the client
        left is read to its end (a loop busy with floods reads some requests late — after the
        client had already recorded them as timed out)."""
        wait_until(lambda: self._get("/_faults/reading") == 0, wait_s, "the fault server to read every request sent")
        return self.seen()

    def flooded(self, mode: str, wait_s: float = 10.0) -> int:
        """Bytes the client took from the most recent endless stream of `mode` (waits for its end:
        an AssertionError if the client is still taking it after wait_s)."""
        def taken() -> tuple[int] | None:  # a tuple: 0 bytes taken is an answer too
            value = self._get("/_faults/flooded").get(mode)
            return None if value is None else (int(value),)

        return int(wait_until(taken, wait_s, f"the end of the {mode} stream (the client still taking it)")[0])


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
        """The extra headers as --headers values (plain Locust / an in-process user)."""
        return [f"X-Gateway-Key: {self.gateway_key}", f"X-Route: {self.route_token}"]

    def url(self, base: str) -> str:
        return base.replace("://", f"://{self.user}:{self.password}@", 1)

    def target(self, server_url: str) -> dict[str, object]:
        """A scenario's target section carrying every secret: URL password, API key, headers from the environment."""
        return {"url": self.url(server_url), "model": "fault-model", "api_key_env": "FAULT_API_KEY",
                "headers": {"X-Gateway-Key": "${GATEWAY_KEY}", "X-Route": "${ROUTE_SECRET}"}}


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


# -- corpora and users ---------------------------------------------------------------------------------


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


def fault_user(url: str, tmp_path: Path, corpus: Path, **options: Any) -> LocalUser:
    """helpers.users.local_user against `url` (userinfo allowed) as the fault cases run it: the
    fault model, TIMEOUT_S, no retries, no extra header, results under tmp_path/out."""
    defaults: dict[str, Any] = {
        "model": "fault-model", "max_tokens": 16, "timeout_s": TIMEOUT_S, "retries": 0, "headers": [],
        "api_key_env": "", "insecure": False, "sampling": "sequential", "seed": 0, "min_distinct": 1,
    }
    return local_user(url, tmp_path, corpus=str(corpus), **{**defaults, **options})
