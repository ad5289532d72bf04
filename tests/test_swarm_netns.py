"""A swarm whose master and workers are on different hosts (issue 28): each in its own network
namespace on one bridge, the target on the host side (helpers/netns.py), links cut, restored or
gone for good as a switch port or a route goes.

- a worker cut off for 12 s mid-step, then back: it rejoins under the same identity, the step is
  flagged and re-run once the swarm is whole, the run ends complete (exit 0) with the re-run
  listed; every request the target answered for each worker is in that worker's records, shipped
  and received (the preflight's test request, from the master's address, is not load);
- the master's host vanishing, or the master killed: each worker's load stops within the
  dead-man's bound (`--master-silence-s`), in-flight requests end as `cancelled` records with the
  reason, and the worker exits 1 after its rejoin window with its unshipped records on disk;
- a worker whose clock runs 5 s ahead (libfaketime): its offset is measured, its records and the
  steps are on the master's clock.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers.netns import Host, Network, leftovers, skip_unless_root
from helpers.processes import CAPACITY, LoggedProcess, descendants, env_with
from helpers.results import read_meta, read_records, read_steps, results_dir
from helpers.scenarios import write_scenario
from helpers.servers import ServerProcess
from helpers.waiting import wait_until

pytestmark = pytest.mark.slow  # real capacity run processes

PORT = 5557  # every namespace has its own ports: the master's default is free in its own


@pytest.fixture
def net() -> Iterator[Network]:
    skip_unless_root()
    network = Network("swarm")
    tag = network.tag
    try:
        yield network
    finally:
        network.close()
    assert leftovers(tag) == []


@pytest.fixture
def target(net: Network) -> Iterator[ServerProcess]:
    """The target on the host side of the bridge: it counts what it answered per client address."""
    with ServerProcess("helpers.netns_target", net.gateway) as server:
        yield server


def answered(server: ServerProcess) -> dict[str, dict]:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/answered", timeout=10) as r:
        return json.loads(r.read())


def _scenario(tmp_path: Path, url: str, **load: object) -> Path:
    return write_scenario(tmp_path, "netns", target={"url": url, "model": "ns-model"},
                          request={"max_tokens": 8, "timeout_s": 60},
                          load={"levels": [2, 2], "step_s": 6, "warmup_s": 1, "min_requests": 5, **load})


def _master(tmp_path: Path, host: Host, sc: Path, workers: int, *extra: str, **env: str) -> LoggedProcess:
    argv = [*CAPACITY, "run", str(sc), "--master", "--expect-workers", str(workers), "--bind", "0.0.0.0",
            "--master-bind-port", str(PORT), *extra]
    return LoggedProcess(host.argv(argv), tmp_path / "master.log", env=env_with(**env), group=True)


def _worker(tmp_path: Path, host: Host, master: Host, sc: Path, prefix: list[str] | None = None,
            **env: str) -> LoggedProcess:
    cwd = tmp_path / host.name
    cwd.mkdir(exist_ok=True)
    argv = [*(prefix or []), *CAPACITY, "run", str(sc), "--worker", "--master-host", master.ip,
            "--master-port", str(PORT)]
    return LoggedProcess(host.argv(argv), tmp_path / f"{host.name}.log", env=env_with(**env), cwd=cwd, group=True)


def _kill_hard(p: LoggedProcess) -> None:
    """SIGKILL `capacity run` and everything under it at once (its Locust child runs in a session of
    its own: a group kill misses it, and the parent-death signal would stop it the clean way)."""
    for proc in [*descendants(p.proc.pid), psutil.Process(p.proc.pid)]:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)


def _close(*procs: LoggedProcess | None) -> None:
    """Kill each process with everything under it, whatever is left of it."""
    for p in procs:
        if p is not None:
            if p.proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    _kill_hard(p)
            p.close()


def _worker_ip(records: list[dict], worker: int) -> str:
    """The address the target saw a worker's answers come to (the response id names it)."""
    ips = {r["response_id"].split("-")[1] for r in records if r["worker"] == worker and r.get("response_id")}
    assert len(ips) == 1, (worker, ips)
    return ips.pop()


def test_a_worker_cut_off_for_12_s_rejoins_and_its_step_is_re_run(net, target, tmp_path):
    master_host, w0, w1 = net.host("master"), net.host("w0"), net.host("w1")
    sc = _scenario(tmp_path, target.url, levels=[2, 4])
    master = _master(tmp_path, master_host, sc, 2, "--no-analyze")
    # The worker's own bound above the cut: this test is about the records of a worker that keeps
    # its requests through a cut (the dead-man's switch has its own tests below).
    workers = [_worker(tmp_path, h, master_host, sc, CAPACITY_MASTER_SILENCE_S="30") for h in (w0, w1)]
    try:
        wait_until(lambda: "[capacity] step 2/" in master.log(), 120, "step 2 to start", master)
        time.sleep(1.5)
        net.cut(w0)
        time.sleep(12)
        net.restore(w0)
        master.proc.wait(180)
        for w in workers:
            w.proc.wait(60)
    finally:
        _close(master, *workers)
    log = master.log()
    assert master.proc.returncode == 0, log[-4000:]
    folder = results_dir(log)
    steps, meta, records = read_steps(folder), read_meta(folder), read_records(folder)
    cut = steps[1]
    assert cut["membership_changed"] and "worker" in cut["membership_reason"], cut
    reruns = [s for s in steps if s.get("rerun_of") == 1]
    assert len(reruns) == 1 and not reruns[0]["membership_changed"], steps
    assert reruns[0]["level"] == cut["level"] and reruns[0]["rerun_reason"] == cut["membership_reason"]
    assert meta["complete"] is True and not meta.get("workers_lost"), meta.get("workers_lost")
    assert meta["reruns"] == [{"step": reruns[0]["index"], "rerun_of": 1, "level": cut["level"],
                               "reason": cut["membership_reason"]}]
    assert "re-run" in log
    # nothing lost across the cut: shipped = received, and per worker what the target answered
    # is exactly what was recorded (the preflight's request came from the master's address)
    by_worker = meta["records"]["by_worker"]
    assert set(by_worker) == {"0", "1"}
    for entry in by_worker.values():
        assert entry["final_batch"] and entry["produced_reported"] == entry["received"], by_worker
    seen = answered(target)
    for worker in (0, 1):
        ip = _worker_ip(records, worker)
        got = {r["response_id"] for r in records if r["worker"] == worker and r["ok"]}
        assert got == set(seen[ip]["ids"]), (worker, len(got), seen[ip]["answered"])
        assert all(r["error_kind"] in (None, "cancelled") for r in records if r["worker"] == worker)
    assert master_host.ip in seen and seen[master_host.ip]["answered"] >= 1  # the preflight, not load


@pytest.mark.parametrize("how", ["vanish", "kill"])
def test_a_worker_stops_its_load_within_the_bound_when_its_master_is_gone(net, target, tmp_path, how):
    master_host, w0 = net.host("master"), net.host("w0")
    sc = _scenario(tmp_path, target.url, levels=[2, 2], step_s=30)
    master = _master(tmp_path, master_host, sc, 1, "--no-analyze")
    worker = _worker(tmp_path, w0, master_host, sc, CAPACITY_MASTER_REJOIN_S="3")
    try:
        wait_until(lambda: "[capacity] step 1/" in master.log(), 120, "step 1 to start", master)
        time.sleep(3)
        gone = time.time()
        if how == "vanish":
            net.vanish(master_host)
        else:  # the master's processes killed, its host and link alive (connections are reset)
            _kill_hard(master)
        worker.proc.wait(60)
    finally:
        _close(master, worker)
    log = worker.log()
    assert worker.proc.returncode == 1, log[-3000:]
    assert "no word from the master" in log and "stopped its load" in log, log[-3000:]
    seen = answered(target)[w0.ip]
    # no new request after the bound (10 s, the default) counted from the master's last word,
    # which came at most a heartbeat before `gone`; 1 s for the check and the kill
    assert gone < seen["last_start_unix"] <= gone + 10.0 + 1.0, seen["last_start_unix"] - gone
    spilled = list((tmp_path / "w0").glob("capacity-unshipped-worker*.jsonl"))
    assert len(spilled) == 1, log[-2000:]
    recs = [json.loads(line) for line in spilled[0].read_text().splitlines() if line.strip()]
    cancelled = [r for r in recs if r["error_kind"] == "cancelled"]
    assert cancelled and all("master" in r["error"] for r in cancelled)
    assert {r["response_id"] for r in recs if r["ok"]} <= set(seen["ids"])


def test_a_worker_whose_clock_runs_5_s_ahead_writes_the_masters_times(net, target, tmp_path):
    from helpers.binaries import require_binary

    faketime = require_binary("faketime")  # scripts/ensure_system_deps.sh; required in CI
    master_host, w0 = net.host("master"), net.host("w0")
    sc = _scenario(tmp_path, target.url, levels=[2], step_s=5)
    master = _master(tmp_path, master_host, sc, 1, "--no-analyze")
    # the wall clock only: monotonic clocks (gevent's timers, the dead-man's switch) are left alone
    worker = _worker(tmp_path, w0, master_host, sc, [faketime, "-f", "+5s"], FAKETIME_DONT_FAKE_MONOTONIC="1")
    try:
        master.proc.wait(120)
        worker.proc.wait(30)
    finally:
        _close(master, worker)
    log = master.log()
    assert master.proc.returncode == 0, log[-3000:] + worker.log()[-2000:]
    folder = results_dir(log)
    meta, steps, records = read_meta(folder), read_steps(folder), read_records(folder)
    clock = meta["clock"]["offsets"]["0"]
    assert abs(clock["offset_s"] - 5.0) < 0.2 and clock["uncertainty_s"] < 0.05, clock
    assert meta["clock"]["flagged"] == []
    # on the master's clock: every record inside its step, the last send when the target saw it
    step = steps[0]
    load = [r for r in records if r["step"] is not None]
    assert len(load) == len(records) > 5 and all(r["step"] == 0 for r in load)
    assert all(step["start_unix"] - 0.5 <= r["sent_unix"] <= step["drain_end_unix"] for r in load)
    last_seen = answered(target)[w0.ip]["last_start_unix"]  # the target shares the master's clock
    assert abs(max(r["sent_unix"] for r in records) - last_seen) < 0.5
