"""Hosts on one machine: network namespaces on a bridge, whose links a test cuts, restores or
makes vanish (issue 28: a swarm whose master and workers are on different hosts).

    with Network("cut") as net:            # a bridge with the host side on .1 (the target's address)
        master = net.host("master")        # a namespace with its own veth into the bridge, .10, .11, ...
        worker = net.host("w0")
        proc = popen(master.argv([...]))   # a program run inside that namespace
        net.cut(worker); net.restore(worker); net.vanish(master)

A cut is the host side of the host's veth set down: packets stop both ways and no connection is
reset (the kernel has no `netem` here), as when a switch port or a route goes. `vanish` is a cut
that is never restored. `close()` (and leaving the `with`) deletes every namespace, veth and the
bridge it made, whatever happened: the names carry this process's pid and a counter, so tests on
several xdist workers never share one. Needs root (`ip netns`): `skip_unless_root()` says so in
one line where the tests are not root; CI is root, so they run there.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from helpers.binaries import require_binary

_counter = itertools.count()


def skip_unless_root() -> None:
    """Skip (one line) unless this process may make network namespaces; a missing `ip` fails in CI."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs the tests as root)")
    require_binary("ip")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


@dataclass
class Host:
    """One namespace: `ns` its name, `ip` its address on the bridge, `link` the host-side veth."""

    name: str
    ns: str
    ip: str
    link: str
    cut: bool = False

    def argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]


@dataclass
class Network:
    """A bridge, the host side on `gateway`, and the namespaces `host()` adds to it."""

    label: str
    hosts: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = next(_counter)
        # ≤ 15 characters per interface name; a /24 of 10.0.0.0/8 this process and counter own
        self.tag = f"{os.getpid() % 100000:05d}{n % 10}"
        self.bridge = f"cpb{self.tag}"
        self.subnet = f"10.{100 + (os.getpid() // 251) % 150}.{(os.getpid() * 7 + n) % 250}"
        self.gateway = f"{self.subnet}.1"
        self._made_bridge = False
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def host(self, name: str) -> Host:
        i = len(self.hosts)
        ns = f"cpn{self.tag}{i:02d}"
        link, inner = f"cpv{self.tag}{i:02d}", f"cpe{self.tag}{i:02d}"
        h = Host(name=name, ns=ns, ip=f"{self.subnet}.{10 + i}", link=link)
        self.hosts.append(h)  # before anything is made: close() deletes whatever exists
        _ip("netns", "add", ns)
        _ip("link", "add", link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", link, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{h.ip}/24", "dev", inner)
        _ip("-n", ns, "link", "set", inner, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "add", "default", "via", self.gateway)
        return h

    def cut(self, h: Host) -> None:
        """No packet in or out of `h` until `restore(h)`; nothing is reset."""
        _ip("link", "set", h.link, "down")
        h.cut = True

    def restore(self, h: Host) -> None:
        _ip("link", "set", h.link, "up")
        h.cut = False

    def vanish(self, h: Host) -> None:
        """`h`'s host is gone for good (its link cut, never restored; its processes live on)."""
        self.cut(h)

    def close(self) -> None:
        for h in self.hosts:
            with contextlib.suppress(Exception):
                _ip("netns", "del", h.ns, check=False)  # its end of the veth pair goes with it
            with contextlib.suppress(Exception):
                _ip("link", "del", h.link, check=False)
        if self._made_bridge:
            with contextlib.suppress(Exception):
                _ip("link", "del", self.bridge, check=False)
        self.hosts.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def leftovers(tag: str) -> list[str]:
    """Interfaces or namespaces of `tag` still present (a test checks its cleanup)."""
    links = _ip("-o", "link", "show", check=False).stdout
    spaces = _ip("netns", "list", check=False).stdout
    return [line for line in (links + spaces).splitlines() if tag in line]
