"""Run a deployment's containers as local processes on loopback (tests only).

A container spec (Compose service or Kubernetes container) becomes a process by changing only
where things are, never what runs: the image's ENTRYPOINT (read from the Dockerfile) plus the
spec's command/args, its environment, with

- service host names → 127.0.0.1 and each (service, container port) → a free local port;
- listen addresses 0.0.0.0 → 127.0.0.1 (tests never listen beyond loopback);
- container mount paths → folders under the test's tmp dir;
- `capacity` → `python -m capacity_plugins` under the interpreter running the tests.

Variable syntax is resolved the way each orchestrator does it: Compose interpolates `${VAR}`,
`${VAR:-default}` and `$$` from the shell environment when it reads the file; Kubernetes expands
`$(VAR)` in command/args from the container's own environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.paths import ROOT
from helpers.processes import CAPACITY

LISTEN_FLAGS = ("--port", "--master-bind-port", "--exporter-port")
BIND_FLAGS = ("--bind", "--host")

_COMPOSE_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def compose_interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation, recursively: `${VAR:-default}` (unset or empty), `${VAR-default}`
    (unset), `${VAR}`, `$VAR`, `$$` → `$`."""
    if isinstance(value, dict):
        return {k: compose_interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [compose_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(3)
        default = m.group(2)
        current = env.get(name)
        if default is not None and (current is None or (current == "" and ":-" in m.group(0))):
            return default
        return current or ""

    return _COMPOSE_VAR.sub(sub, value)


def k8s_expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion in command/args: an undefined reference stays as written."""
    return _K8S_VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def dockerfile_entrypoint() -> list[str]:
    from dockerfile_parse import DockerfileParser

    entry = [i["value"] for i in DockerfileParser(path=str(ROOT / "Dockerfile")).structure
             if i["instruction"] == "ENTRYPOINT"]
    return list(json.loads(entry[-1]))


@dataclass
class Network:
    """Where each (service, container port) and each mount lives on this machine."""

    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    mounts: dict[str, Path] = field(default_factory=dict)

    def port(self, service: str, port: int | str) -> int:
        return self.ports[(service, int(port))]

    def url(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            host, port = m.group(2), int(m.group(3))
            if (host, port) not in self.ports:
                return m.group(0)
            return f"{m.group(1)}127.0.0.1:{self.ports[(host, port)]}"

        return re.sub(r"(https?://|^)([A-Za-z][\w.-]*):(\d+)", sub, text)

    def path(self, arg: str) -> str:
        for inside, outside in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if arg == inside or arg.startswith(inside.rstrip("/") + "/"):
                return str(outside) + arg[len(inside):]
        return arg

    def argv(self, service: str, argv: list[str]) -> list[str]:
        out: list[str] = []
        master_host = None
        for i, arg in enumerate(argv):
            prev = argv[i - 1] if i else ""
            if i == 0 and arg == "capacity":
                out.extend(CAPACITY)
            elif prev in LISTEN_FLAGS:
                out.append(str(self.port(service, arg)))
            elif prev in BIND_FLAGS and arg == "0.0.0.0":
                out.append("127.0.0.1")
            elif prev == "--master-host":
                master_host = arg
                out.append("127.0.0.1")
            elif prev == "--master-port":
                assert master_host is not None, "--master-port before --master-host"
                out.append(str(self.port(master_host, arg)))
            else:
                out.append(self.url(self.path(arg)))
        return out


class Processes:
    """Started processes with their logs in files; stop() ends every one still running."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        base.update(env)
        log = (self.logs / f"{name}.log").open("wb")
        proc = subprocess.Popen(argv, env=base, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def all_logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in self.procs)

    # helpers.waiting.Watched: a wait shows every log when it times out (a process may exit on purpose)
    def died(self) -> str | None:
        return None

    def tail(self) -> str:
        return self.all_logs()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def prometheus_query_range(base: str, expr: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
    from urllib.parse import urlencode

    url = f"{base}/api/v1/query_range?" + urlencode({"query": expr, "start": start, "end": end, "step": step_s})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def only(items: Iterable[Any]) -> Any:
    found = list(items)
    assert len(found) == 1, found
    return found[0]
