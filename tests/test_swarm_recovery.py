"""The swarm's recovery parts on their own, with injected clocks and fake runners (no process,
no network): the dead-man's switch, a lost worker that rejoins, the clock offset estimator,
and what the analysis says of re-runs, rejoins and uncertain clocks. The real thing, across
network namespaces: tests/test_swarm_netns.py."""

from __future__ import annotations

from types import SimpleNamespace

import gevent
import pytest
from locust.event import Events

from capacity_plugins.contracts import clock as master_clock
from capacity_plugins.contracts.meta import Meta
from capacity_plugins.swarm.clock import MAX_UNCERTAINTY_S, MasterClock
from capacity_plugins.swarm.deadman import EXIT_MASTER_LOST, DeadMansSwitch
from capacity_plugins.swarm.membership import SwarmMembership


class Runner:
    def __init__(self) -> None:
        self.user_classes_count = {"LLMUser": 3}
        self.stopped: list[dict[str, int]] = []
        self.quits = 0
        self.clients = SimpleNamespace(all=[])

    def stop_users(self, counts):
        self.stopped.append(dict(counts))
        self.user_classes_count = {k: 0 for k in counts}

    def quit(self):
        self.quits += 1


def _switch(tmp_path, monkeypatch, sink=None):
    monkeypatch.chdir(tmp_path)
    now = {"t": 100.0}
    env = SimpleNamespace(events=Events(), runner=Runner(), stop_timeout=31.0, process_exit_code=None)
    client = SimpleNamespace(cancel_reason=None)
    sw = DeadMansSwitch(env, client, sink, lambda: 4, silence_s=10.0, rejoin_s=30.0, clock=lambda: now["t"])
    return sw, env, client, now


def test_the_switch_is_armed_by_the_masters_first_answer_and_stops_the_load_after_the_bound(tmp_path, monkeypatch):
    sw, env, client, now = _switch(tmp_path, monkeypatch)
    sw.check(1000.0)
    assert env.runner.stopped == []  # never heard from a master: nothing to time
    sw.heard()
    sw.check(now["t"] + 10.0)
    assert env.runner.stopped == []
    sw.check(now["t"] + 10.3)
    assert env.runner.stopped == [{"LLMUser": 3}] and env.stop_timeout == 0
    assert "no word from the master" in client.cancel_reason  # the cancelled records say why
    assert env.process_exit_code is None  # stopped, not gone: it waits for the master to come back
    now["t"] += 20.0
    sw.heard()  # the master answers again: rejoined, same identity, load again at its next dispatch
    assert client.cancel_reason is None and sw.trips[-1]["rejoined_after_s"] == pytest.approx(9.7, abs=0.01)
    sw.check(now["t"] + 5.0)
    assert len(env.runner.stopped) == 1


def test_a_master_that_never_answers_again_makes_the_worker_write_its_records_and_exit_1(tmp_path, monkeypatch):
    lines = [b'{"request_id": "a", "ok": true}\n', b'{"request_id": "b", "ok": false}\n']
    sink = SimpleNamespace(unacknowledged=lambda: lines)  # the worker's shipping
    sw, env, _client, now = _switch(tmp_path, monkeypatch, sink)
    sw.heard()
    sw.check(now["t"] + 11.0)
    sw.check(now["t"] + 11.0 + 30.5)
    assert env.process_exit_code == EXIT_MASTER_LOST == 1
    gevent.sleep(0)  # the quit runs in its own greenlet
    assert env.runner.quits == 1
    (spilled,) = tmp_path.glob("capacity-unshipped-worker4-*.jsonl")
    assert spilled.read_bytes() == b"".join(lines)


def test_a_lost_worker_that_comes_back_rejoins_and_the_run_does_not_count_it_lost():
    client = SimpleNamespace(id="w-a", state="running", user_count=1, cpu_usage=0)
    runner = SimpleNamespace(clients=SimpleNamespace(all=[client]), get_worker_index=lambda cid: 0)
    m = SwarmMembership(runner)
    m.test_started()
    client.state = "missing"
    m.check(now_unix=110.0)
    assert [w["worker"] for w in m.lost_list()] == [0]
    client.state = "running"
    m.check(now_unix=115.0)
    assert m.lost_list() == [] and [w["worker"] for w in m.rejoined_list()] == [0]
    assert m.lost_between(100.0, 112.0) and m.rejoined_between(112.0, 120.0) == [0]  # the steps still see both
    client.state = "missing"  # lost again: lost again
    m.check(now_unix=130.0)
    assert [w["lost_unix"] for w in m.lost_list()] == [130.0] and m.rejoined_list() == []


def test_the_clock_offset_is_the_least_delayed_round_trip_and_its_uncertainty_half_of_it():
    c = MasterClock(SimpleNamespace(clients=SimpleNamespace(all=[])))
    # a worker 5 s ahead: 10 ms each way, then a round trip delayed 200 ms on the way back
    c.add(0, t0=100.0, t1=105.010, t2=105.011, t3=100.021)
    c.add(0, t0=102.0, t1=107.010, t2=107.011, t3=102.221)
    est = c.estimate(0)
    assert est["offset_s"] == pytest.approx(5.0, abs=1e-6) and est["uncertainty_s"] == pytest.approx(0.010)
    assert est["samples"] == 2
    meta = c.meta([0, 1])
    assert meta["offsets"]["0"]["offset_s"] == pytest.approx(5.0)
    assert meta["flagged"] == [{"worker": 1, "why": "unknown (no clock round trip)"}]
    c.add(2, t0=0.0, t1=0.5, t2=0.5, t3=2 * MAX_UNCERTAINTY_S + 0.5)  # only a slow round trip: flagged
    assert [f["worker"] for f in c.meta([0, 1, 2])["flagged"]] == [1, 2]


def test_the_log_names_an_offset_beyond_its_uncertainty_not_a_round_trip_held_up_by_a_cut(caplog):
    c = MasterClock(SimpleNamespace(clients=SimpleNamespace(all=[])))
    with caplog.at_level("WARNING", logger="capacity_plugins.swarm.clock"):
        c.add(0, t0=100.0, t1=100.010, t2=100.011, t3=100.021)  # in step with the master
        c.add(0, t0=102.0, t1=115.8, t2=115.8, t3=115.81)  # a ping sent before a 13-s cut: +6.9 s ± 6.9 s
        c.add(1, t0=100.0, t1=105.010, t2=105.011, t3=100.021)  # 5 s ahead, ± 10 ms
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "worker 1's clock is +5.000 s off" in lines[0], lines


def test_a_worker_puts_its_times_on_the_masters_clock():
    import time

    try:
        master_clock.set_offset(5.0)
        assert abs(time.time() - master_clock.master_time() - 5.0) < 0.01
    finally:
        master_clock.set_offset(0.0)


def test_the_analysis_lists_each_re_run_each_rejoin_and_an_uncertain_clock():
    from capacity_plugins.analysis.validity import meta_warnings

    meta = Meta(reruns=[{"step": 2, "rerun_of": 1, "level": 4, "reason": "worker 0 lost (no heartbeat)"}],
                workers_rejoined=[{"worker": 0, "reason": "no heartbeat"}],
                clock={"flagged": [{"worker": 1, "why": "unknown (no clock round trip)"}]})
    text = "\n".join(meta_warnings(meta))
    assert "step 3 re-ran step 2 at 4: worker 0 lost (no heartbeat)" in text
    assert "worker 0 was lost (no heartbeat) and rejoined" in text
    assert "worker 1's clock offset to the master's is unknown" in text


def test_a_worker_keeps_what_it_shipped_until_the_master_acknowledges_it():
    from capacity_plugins.swarm.shipping import WorkerShipping

    pending: list[list[bytes]] = [[b"a\n"], [b"b\n"], [b"c\n"], [b"d\n"]]
    sent = []
    sink = SimpleNamespace(take_batch=lambda final=False: pending.pop(0) if pending else [], produced=4)
    runner = SimpleNamespace(send_message=lambda *a: sent.append(a))
    s = WorkerShipping(runner, sink, lambda: 0)
    s.ship(final=False)               # a, under mark 0
    mark = s.next_mark()              # a pong leaves: everything before it is older than mark 1
    s.ship(final=False)               # b, under mark 1
    s.confirm(mark)                   # the master had the pong: a arrived, b not known yet
    assert [lines for _m, lines in s.unconfirmed] == [[b"b\n"]]
    assert s.unacknowledged() == [b"b\n", b"c\n"]  # then what was never sent (final: the rest)
    assert len(sent) == 2
