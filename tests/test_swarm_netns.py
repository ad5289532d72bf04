"""A swarm whose master and workers are on different hosts (issue 28): each in its own network
namespace on one bridge, the target on the host side (helpers/netns.py), links cut, restored or
gone for good as a switch port or a route goes. Two runs for the module, each read by several
tests (the module's bridge and target are shared):

- the cut: a worker cut off for 15 s mid-step (past the master's 10-s heartbeat tolerance), then
  back: it rejoins under the same identity, the step is flagged and re-run once the swarm is whole, the run ends in a decision (exit 0) with the
  re-run listed; every request the target answered for each worker is in that worker's records,
  shipped and received (the preflight's test request, from the master's address, is not load).
  Its other worker's clock runs 5 s ahead (libfaketime): its offset is measured, its records and
  the steps are on the master's clock;
- the master gone, two swarms side by side: one master's host vanishes, the other master is
  killed: each worker's load stops within the dead-man's bound (`--master-silence-s`), in-flight
  requests end as `cancelled` records with the reason, and the worker exits 1 after its rejoin
  window with its unshipped records on disk.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from helpers.netns import Host, Network, leftovers, skip_unless_root
from helpers.processes import CAPACITY, LoggedProcess, descendants, env_with
from helpers.results import read_meta, read_records, read_steps, results_dir
from helpers.scenarios import write_scenario
from helpers.servers import ServerProcess
from helpers.waiting import wait_until

from capacity_plugins.swarm.locust_compat import HEARTBEAT_LIVENESS_S

# real capacity run processes; several generators (a swarm, two at once) whose timing the assertions
# read (a re-run judged valid, a clock offset within 50 ms, load stopped within its bound): alone
pytestmark = [pytest.mark.slow, pytest.mark.alone]

PORT = 5557  # every namespace has its own ports: the master's default is free in its own


@pytest.fixture(scope="module")
def net() -> Iterator[Network]:
    """One bridge for the module; each run adds its own hosts (namespaces cost ~0.1 s each)."""
    skip_unless_root()
    network = Network("swarm")
    tag = network.tag
    try:
        yield network
    finally:
        network.close()
    assert leftovers(tag) == []


@pytest.fixture(scope="module")
def target(net: Network) -> Iterator[ServerProcess]:
    """The target on the host side of the bridge: it counts what it answered per client address."""
    # up to 40 tokens 50 ms apart: the cut swarm asks for 8 (0.4 s answers), the gone swarms for 40
    # (2 s: requests are in flight when their switch trips, whenever that is)
    with ServerProcess("helpers.netns_target", net.gateway, "40") as server:
        yield server


def answered(server: ServerProcess) -> dict[str, dict]:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/answered", timeout=10) as r:
        return json.loads(r.read())


def _scenario(folder: Path, name: str, url: str, max_tokens: int = 8, **load: object) -> Path:
    return write_scenario(folder, name, target={"url": url, "model": "ns-model"},
                          request={"max_tokens": max_tokens, "timeout_s": 60},
                          load={"levels": [2], "step_s": 4, "warmup_s": 1, "min_requests": 5, **load})


def _master(folder: Path, host: Host, sc: Path, workers: int, *extra: str) -> LoggedProcess:
    argv = [*CAPACITY, "run", str(sc), "--master", "--expect-workers", str(workers), "--bind", "0.0.0.0",
            "--master-bind-port", str(PORT), *extra]
    return LoggedProcess(host.argv(argv), folder / f"{host.name}.log", env=env_with(), group=True)


def _worker(folder: Path, host: Host, master: Host, sc: Path, prefix: list[str] | None = None,
            **env: str) -> LoggedProcess:
    cwd = folder / host.name
    cwd.mkdir(exist_ok=True)
    argv = [*(prefix or []), *CAPACITY, "run", str(sc), "--worker", "--master-host", master.ip,
            "--master-port", str(PORT)]
    return LoggedProcess(host.argv(argv), folder / f"{host.name}.log", env=env_with(**env), cwd=cwd, group=True)


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


# -- a worker cut off for 15 s mid-step, beside a worker whose clock runs 5 s ahead: one run ----------

@dataclass
class CutRun:
    log: str
    code: int
    folder: Path
    steps: list[dict]
    meta: dict
    records: list[dict]
    summary: dict
    analyzed: int  # `capacity analyze`'s exit: 0 is a decision
    answered: dict[str, dict]
    master_ip: str
    cut: int  # the cut worker's index (workers are numbered as they connect)
    skewed: int


SILENCE_S = 5.0  # the gone masters' workers' bound (the default is 10 s: deadman.DEFAULT_SILENCE_S)
# Longer than the master's heartbeat tolerance: the cut worker is lost, then rejoins. Locust marks a
# worker missing at the first 1-s tick after the tolerance ran out (its counter must go below 0), and
# the worker's last heartbeat may have left just before the cut: 12 s (2 over) once went unmarked
# ("stopped reporting for 13 s", no loss, no rejoin); 5 s over leaves room for a late tick.
CUT_S = HEARTBEAT_LIVENESS_S + 5.0


@dataclass
class Swarms:
    cut: CutRun
    gone: dict[str, dict]  # "vanish" / "kill" → what its worker did


@pytest.fixture(scope="module")
def swarms(net: Network, target: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Swarms:
    """Three swarms, in namespaces on the module's bridge, in one run of ~the cut's length.

    The cut swarm: a master, worker `w0-cut` (cut off for CUT_S from 1.5 s into step 2, then back;
    longer only while the other swarms are still starting, on a busy machine)
    and worker `w1-skew` (its wall clock 5 s ahead, libfaketime): a two-level sweep (2, 4 users),
    then its analysis. Started while w0 is cut off, two one-worker swarms on a 30-s step: 2 s into
    it one master's host vanishes (its link cut for good) and the other master is killed (host and
    link alive: connections are reset); on an idle machine they are done about when the cut
    swarm's re-run ends."""
    from helpers.binaries import require_binary

    faketime = require_binary("faketime")  # scripts/ensure_system_deps.sh; required in CI
    folder = tmp_path_factory.mktemp("swarms")
    master_host, w0, w1 = net.host("m-cut"), net.host("w0-cut"), net.host("w1-skew")
    sc = _scenario(folder, "cut", target.url, levels=[2, 4])
    master = _master(folder, master_host, sc, 2, "--no-analyze")
    # The cut worker's own bound above the cut: this swarm is about the records of a worker that
    # keeps its requests through a cut. The skewed worker's wall clock only: monotonic clocks
    # (gevent's timers, the switch) are left alone.
    workers = [_worker(folder, w0, master_host, sc, CAPACITY_MASTER_SILENCE_S="60"),
               _worker(folder, w1, master_host, sc, [faketime, "-f", "+5s"], FAKETIME_DONT_FAKE_MONOTONIC="1")]
    gone_sc = _scenario(folder, "gone", target.url, max_tokens=40, step_s=30)
    gone_hosts: dict[str, tuple[Host, Host]] = {}
    gone_procs: dict[str, tuple[LoggedProcess, LoggedProcess]] = {}
    gone: dict[str, dict] = {}
    cut_at: float | None = None
    gone_at: float | None = None

    def restore_when_due() -> None:
        # CUT_S, and not before the other swarms started (their start-up, both cores for a few
        # seconds, stays out of the re-run, which must be valid; on an idle machine it is over in time)
        nonlocal cut_at
        if cut_at is not None and gone_at is not None and time.monotonic() >= cut_at + CUT_S:
            net.restore(w0)
            cut_at = None

    def pause(seconds: float) -> None:  # a sleep that restores w0's link on time
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            restore_when_due()
            time.sleep(0.05)

    try:
        wait_until(lambda: "[capacity] step 2/" in master.log(), 120, "step 2 to start", master)
        time.sleep(1.5)
        net.cut(w0)
        cut_at = time.monotonic()
        # the other two swarms start while w0 is cut off: their start-up falls in the step the cut
        # invalidates anyway
        for how in ("vanish", "kill"):
            m, w = gone_hosts[how] = (net.host(f"m-{how}"), net.host(f"w-{how}"))
            gone_procs[how] = (_master(folder, m, gone_sc, 1, "--no-analyze"),
                               _worker(folder, w, m, gone_sc, CAPACITY_MASTER_SILENCE_S=f"{SILENCE_S:g}",
                                       CAPACITY_MASTER_REJOIN_S="2"))
        for gm, _ in gone_procs.values():
            wait_until(lambda gm=gm: restore_when_due() or "[capacity] step 1/" in gm.log(), 120,
                       "step 1 to start", gm, interval=0.05)
        pause(2)
        gone_at = time.time()
        net.vanish(gone_hosts["vanish"][0])
        _kill_hard(gone_procs["kill"][0])
        while cut_at is not None:
            pause(0.05)
        for how, (_, gw) in gone_procs.items():
            gw.proc.wait(60)
            gone[how] = {"gone": gone_at, "code": gw.proc.returncode, "log": gw.log(),
                         "cwd": folder / gone_hosts[how][1].name, "ip": gone_hosts[how][1].ip}
        master.proc.wait(180)
        for w in workers:
            w.proc.wait(60)
    finally:
        _close(master, *workers, *(p for pair in gone_procs.values() for p in pair))
    seen = answered(target)
    for o in gone.values():
        o["seen"] = seen[o["ip"]]
    log = master.log()
    results = results_dir(log)
    # the decision, in this process and without the report's plots: the part of the analysis the
    # claims need (the run's own analysis is the same call, tests/test_run.py)
    from capacity_plugins.cli import main as capacity

    analyzed = capacity(["analyze", str(results), "--no-report", "--quiet", "--format", "answer"])
    summary = json.loads((results / "summary.json").read_text())
    records = read_records(results)
    index = {_worker_ip(records, i): i for i in (0, 1)}
    cut = CutRun(log=log, code=master.proc.returncode, folder=results, steps=read_steps(results),
                 meta=read_meta(results), records=records, summary=summary, analyzed=analyzed, answered=seen,
                 master_ip=master_host.ip, cut=index[w0.ip], skewed=index[w1.ip])
    return Swarms(cut=cut, gone=gone)


@pytest.fixture
def cut_run(swarms: Swarms) -> CutRun:
    return swarms.cut


def test_a_worker_cut_off_past_the_heartbeat_tolerance_rejoins_its_step_is_re_run_and_decides(cut_run):
    r = cut_run
    assert r.code == 0, r.log[-4000:]
    assert r.analyzed == 0 and r.summary["answer"], r.summary.get("warnings")  # a decision
    cut = r.steps[1]
    assert cut["membership_changed"] and f"worker {r.cut}" in cut["membership_reason"], cut
    reruns = [s for s in r.steps if s.get("rerun_of") == 1]
    assert len(reruns) == 1 and not reruns[0]["membership_changed"], r.steps
    assert reruns[0]["level"] == cut["level"] and reruns[0]["rerun_reason"] == cut["membership_reason"]
    assert r.meta["complete"] is True and not r.meta.get("workers_lost"), r.meta.get("workers_lost")
    assert [w["worker"] for w in r.meta["workers_rejoined"]] == [r.cut]  # the same identity, back
    assert r.meta["reruns"] == [{"step": reruns[0]["index"], "rerun_of": 1, "level": cut["level"],
                                 "reason": cut["membership_reason"]}]
    assert "re-run" in r.log
    # the report's warnings list the re-run and why
    assert f"step {reruns[0]['index'] + 1} re-ran step 2 at 4: {cut['membership_reason']}" in r.summary["warnings"]


def test_nothing_a_worker_was_answered_is_lost_across_the_cut(cut_run):
    r = cut_run
    # shipped = received, and per worker what the target answered is exactly what was recorded
    # (the preflight's request came from the master's address: not load)
    by_worker = r.meta["records"]["by_worker"]
    assert set(by_worker) == {"0", "1"}
    for entry in by_worker.values():
        assert entry["final_batch"] and entry["produced_reported"] == entry["received"], by_worker
    for worker in (0, 1):
        ip = _worker_ip(r.records, worker)
        got = {x["response_id"] for x in r.records if x["worker"] == worker and x["ok"]}
        assert got == set(r.answered[ip]["ids"]), (worker, len(got), r.answered[ip]["answered"])
        assert all(x["error_kind"] in (None, "cancelled") for x in r.records if x["worker"] == worker)
    assert r.answered[r.master_ip]["answered"] >= 1  # the preflight, not load


def test_a_worker_whose_clock_runs_5_s_ahead_writes_the_masters_times(cut_run):
    r = cut_run
    clock = r.meta["clock"]["offsets"][str(r.skewed)]
    assert abs(clock["offset_s"] - 5.0) < 0.2 and clock["uncertainty_s"] < 0.05, clock
    assert abs(r.meta["clock"]["offsets"][str(r.cut)]["offset_s"]) < 0.2  # the unshifted worker: no offset
    assert r.meta["clock"]["flagged"] == []
    # on the master's clock: each of its records inside the window of the step it names, its
    # last send when the target (which shares the master's clock) saw it start
    steps = {s["index"]: s for s in r.steps}
    load = [x for x in r.records if x["worker"] == r.skewed and x["step"] is not None]
    assert len(load) > 5
    assert all(steps[x["step"]]["start_unix"] - 0.5 <= x["sent_unix"] <= steps[x["step"]]["drain_end_unix"]
               for x in load)
    last_seen = r.answered[_worker_ip(r.records, r.skewed)]["last_start_unix"]
    assert abs(max(x["sent_unix"] for x in r.records if x["worker"] == r.skewed) - last_seen) < 0.5


@pytest.mark.parametrize("how", ["vanish", "kill"])
def test_a_worker_stops_its_load_within_the_bound_when_its_master_is_gone(swarms, how):
    o = swarms.gone[how]
    log = o["log"]
    assert o["code"] == 1, log[-3000:]
    assert "no word from the master" in log and "stopped its load" in log, log[-3000:]
    # no new request after the bound counted from the master's last word, which came at most a
    # heartbeat before `gone`; 1 s for the check and the kill
    assert o["gone"] < o["seen"]["last_start_unix"] <= o["gone"] + SILENCE_S + 1.0, o["seen"]["last_start_unix"] - o["gone"]
    spilled = list(o["cwd"].glob("capacity-unshipped-worker*.jsonl"))
    assert len(spilled) == 1, log[-2000:]
    recs = [json.loads(line) for line in spilled[0].read_text().splitlines() if line.strip()]
    cancelled = [r for r in recs if r["error_kind"] == "cancelled"]
    assert cancelled and all("master" in r["error"] for r in cancelled)
    assert {r["response_id"] for r in recs if r["ok"]} <= set(o["seen"]["ids"])
