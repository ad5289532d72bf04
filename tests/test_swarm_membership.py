"""A worker that joins mid-run: it gets the test's setup (everyone's shards are recut, so they stay
disjoint), the step it joined in is invalid (a swarm that changed size measured it) and is run
again at the same level once the swarm is stable (load.max_reruns), the steps after it count, and
the run is complete."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from helpers.ports import free_port
from helpers.processes import CAPACITY, popen
from helpers.results import read_records, read_steps, results_dir
from helpers.scenarios import write_scenario

pytestmark = [pytest.mark.slow, pytest.mark.background]  # waits on its processes, asserts no timing: beside the measured tests (tests/README.md)


def test_a_late_worker_invalidates_only_the_step_it_joined_which_is_re_run(tmp_path):
    # two levels: the step the late worker joined is run again (load.max_reruns) as a third step
    sc = write_scenario(tmp_path, "late", target={"url": "embedded", "simulator": {"max_num_seqs": 8}},
                        request={"max_tokens": 16, "timeout_s": 20},
                        # background (nice 19): the generator's own limit loose, the swarm's validity is the test
                        load={"levels": [2, 4], "step_s": 8, "warmup_s": 1, "min_requests": 10,
                              "max_loop_lag_p99_ms": 500})
    port = free_port()  # `capacity run --master` cannot bind port 0 and say where it listens
    master = popen([*CAPACITY, "run", str(sc), "--master", "--expect-workers", "1", "--master-bind-port", str(port),
                    "--no-analyze"])
    worker = [*CAPACITY, "run", str(sc), "--worker", "--master-port", str(port)]
    first = popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    late = None
    out = []
    try:
        assert master.stdout is not None
        for line in master.stdout:
            out.append(line)
            if line.startswith("[capacity] step 2/2"):
                late = popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                break
        rest, _ = master.communicate(timeout=240)
        out.append(rest)
    finally:
        for p in (master, first, late):
            if p is not None and p.poll() is None:
                time.sleep(2)
                if p.poll() is None:
                    p.kill()
    text = "".join(out)
    assert master.returncode == 0, text[-3000:]
    folder = results_dir(text)
    steps = read_steps(folder)
    assert not steps[0]["membership_changed"]
    assert steps[1]["membership_changed"] and "joined" in steps[1]["membership_reason"]
    assert not steps[2]["membership_changed"], steps[2]["membership_reason"]
    # the re-run: the same level, with why, once the swarm was stable; listed in meta.json
    assert len(steps) == 3 and steps[2]["rerun_of"] == 1 and steps[2]["level"] == steps[1]["level"]
    assert steps[2]["rerun_reason"] == steps[1]["membership_reason"]
    recs = read_records(folder)
    assert {r["worker"] for r in recs if r["step"] == 2} == {0, 1}  # the late one worked in step 3
    prompts = [r["prompt_id"] for r in recs if r["step"] == 2]
    assert len(prompts) == len(set(prompts))  # recut shards: still disjoint
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["complete"] is True and meta["workers_lost"] == []
    assert meta["reruns"] == [{"step": 2, "rerun_of": 1, "level": steps[1]["level"],
                               "reason": steps[1]["membership_reason"]}]
