"""`capacity run` supervises its Locust child: same session (no scheduling handicap), its own
process group (Ctrl-C reaches only the parent), and no load outlives the supervisor."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.processes import CAPACITY, descendants, env_with, popen, python, read_until
from helpers.results import read_meta, read_steps, results_dir
from helpers.scenarios import write_scenario

from capacity_plugins.runner.child import run_child

pytestmark = [pytest.mark.slow, pytest.mark.background]  # waits on its processes, asserts no timing: beside the measured tests (tests/README.md)

SIM = {"url": "embedded", "simulator": {"max_num_seqs": 4}}


def _long_run(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    sc = write_scenario(
        tmp_path, "long", target=SIM, request={"max_tokens": 200, "timeout_s": 30},
        load={"kind": "concurrency_sweep", "levels": [2], "step_s": 300, "warmup_s": 1},
    )
    return popen([*CAPACITY, "run", str(sc), *extra])


def _wait_for_step(p: subprocess.Popen[str]) -> None:
    read_until(p, "[capacity] step 1/1", 90)


def _locust_children(parent: psutil.Process) -> list[psutil.Process]:
    return descendants(parent.pid, "locust")


def _autogroup(pid: int) -> str | None:
    path = Path(f"/proc/{pid}/autogroup")
    try:
        fields = path.read_text().split()  # "/autogroup-NN nice 0": the group, not its nice value
    except OSError:
        return None
    return fields[0] if fields else None  # empty where the kernel has no autogroups (some CI sandboxes)


@pytest.mark.parametrize("layout", [[], ["--processes", "2"]], ids=["local", "processes"])
def test_child_shares_the_session_and_dies_with_its_supervisor(tmp_path, layout):
    p = _long_run(tmp_path, *layout)
    try:
        _wait_for_step(p)
        parent = psutil.Process(p.pid)
        children = _locust_children(parent)
        assert children, "no Locust child found"
        top = min(children, key=lambda c: c.create_time())
        # same session as `capacity run` (so the same scheduling autogroup) ...
        assert os.getsid(top.pid) == os.getsid(p.pid)
        assert _autogroup(top.pid) == _autogroup(p.pid)
        # ... but its own process group: a terminal's Ctrl-C goes to `capacity run` only
        assert os.getpgid(top.pid) == top.pid != os.getpgid(p.pid)
        everything = [*parent.children(recursive=True)]
        p.kill()  # SIGKILL: no chance to clean up; the children must notice by themselves
        p.wait(timeout=10)
        # a clean stop (cancelled records written, workers told to quit) takes seconds; a loaded host more
        gone, alive = psutil.wait_procs(everything, timeout=90)
        assert not alive, [(c.pid, c.cmdline()[:4]) for c in alive]
    finally:
        if p.poll() is None:
            p.kill()
        for c in psutil.process_iter():  # every process on the machine: any may be a zombie or gone
            with contextlib.suppress(psutil.Error):
                if str(tmp_path) in " ".join(c.cmdline()):
                    c.kill()


def test_sigterm_to_the_supervisor_stops_the_run_cleanly(tmp_path):
    p = _long_run(tmp_path)
    try:
        _wait_for_step(p)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, out[-3000:]
    assert "Traceback" not in out


def test_a_worker_killed_mid_step_invalidates_the_step_and_the_run(tmp_path):
    sc = write_scenario(
        tmp_path, "lossy", target=SIM, request={"max_tokens": 16, "timeout_s": 30},
        # no re-run: it would wait up to 30 s for a worker that never comes back (the re-run of a
        # step the swarm's change invalidated: tests/test_swarm_membership.py, test_swarm_netns.py)
        load={"kind": "concurrency_sweep", "levels": [2, 4, 4], "step_s": 8, "warmup_s": 1, "min_requests": 10,
              "max_reruns": 0},
    )
    p = popen([*CAPACITY, "run", str(sc), "--processes", "2", "--no-analyze"])
    try:
        assert p.stdout is not None
        out = []
        for line in p.stdout:
            out.append(line)
            if line.startswith("[capacity] step 2/3"):
                break
        time.sleep(2.0)
        top = min(_locust_children(psutil.Process(p.pid)), key=lambda c: c.create_time())
        victim = top.children()[-1]  # one of the two forked workers
        victim.kill()
        rest, _ = p.communicate(timeout=180)
        out.append(rest)
    finally:
        if p.poll() is None:
            p.kill()
    text = "".join(out)
    assert p.returncode == 1, text[-3000:]  # incomplete: a smaller swarm measured part of it
    folder = results_dir(text)
    meta = read_meta(folder)
    assert meta["complete"] is False and meta["workers_lost"], meta.get("workers_lost")
    assert meta["records"]["lost"] is None  # unknown, never a reassuring 0
    steps = read_steps(folder)
    assert not steps[0]["membership_changed"]
    assert steps[1]["membership_changed"] and "worker" in steps[1]["membership_reason"]
    assert "no re-run left (load.max_reruns 0)" in text and not any(s.get("rerun_of") is not None for s in steps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_nothing_between_fork_and_exec_starts_a_process(tmp_path, monkeypatch):
    """libc is found before the fork: `find_library` runs `ldconfig`, and a subprocess started in
    the forked child (gevent-patched, as in a test process) hung it before exec — its parent
    waited for ever (a suite run stopped 300 s on the test below). The child inherits this patch,
    so a lookup there raises and Popen fails."""
    import ctypes.util

    from capacity_plugins.contracts.processes import libc_prctl

    assert libc_prctl() is not None  # looked up here, in the parent, once

    def no_lookup_after_fork(_name: str) -> str:
        raise AssertionError("find_library called between fork and exec")

    monkeypatch.setattr(ctypes.util, "find_library", no_lookup_after_fork)
    out = tmp_path / "pdeathsig"
    code = ("from capacity_plugins.swarm.supervisor import parent_death_signal; "
            f"open({str(out)!r}, 'w').write(str(parent_death_signal()))")
    assert run_child([sys.executable, "-c", code], env_with()) == (0, None)
    assert out.read_text() == str(int(signal.SIGTERM))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_child_gets_one_death_signal_not_two(tmp_path):
    """`capacity run`'s child has the kernel's parent-death signal armed, so its supervisor-pipe
    watchdog sends nothing (swarm/supervisor.py): a `kill -9` of `capacity run` gives it one
    SIGTERM, not a second one thrown into the clean stop the first started."""
    out = tmp_path / "pdeathsig"
    code = ("from capacity_plugins.swarm.supervisor import parent_death_signal; "
            f"open({str(out)!r}, 'w').write(str(parent_death_signal()))")
    assert run_child([sys.executable, "-c", code], env_with()) == (0, None)
    assert out.read_text() == str(int(signal.SIGTERM))
    # a process started otherwise has none: there the watchdog is what stops the run
    assert python(code).returncode == 0 and out.read_text() == "0"
