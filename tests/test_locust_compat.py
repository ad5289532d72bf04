"""Locust still has the shape swarm/locust_compat.py works around: these fail when Locust changes."""

from __future__ import annotations

import inspect

from locust import runners

from capacity_plugins.swarm import locust_compat


def test_master_quit_still_waits_a_fixed_half_second_for_final_reports():
    assert locust_compat.EXPECTED_QUIT_WAIT in inspect.getsource(runners.MasterRunner.quit)


def test_heartbeat_liveness_is_still_read_from_the_module_when_a_worker_registers_and_beats():
    source = inspect.getsource(runners.MasterRunner)
    assert "heartbeat_liveness=HEARTBEAT_LIVENESS" in source  # a worker that connects
    assert "c.heartbeat = HEARTBEAT_LIVENESS" in source  # a heartbeat heard
    assert "client.heartbeat < 0" in inspect.getsource(runners.MasterRunner.heartbeat_worker)


def test_the_master_tolerates_the_configured_silence(monkeypatch):
    monkeypatch.setattr(runners, "HEARTBEAT_LIVENESS", 3)
    locust_compat.tolerate_slow_heartbeats()
    assert runners.HEARTBEAT_LIVENESS == locust_compat.HEARTBEAT_LIVENESS_S
    node = runners.WorkerNode("w", heartbeat_liveness=runners.HEARTBEAT_LIVENESS)
    assert node.heartbeat == locust_compat.HEARTBEAT_LIVENESS_S


def test_the_csv_writer_is_still_a_method_run_as_its_own_greenlet_and_closed_by_close_files():
    from locust.stats import StatsCSVFileWriter

    assert callable(getattr(StatsCSVFileWriter, "stats_writer", None))
    assert "close_files" in vars(StatsCSVFileWriter)
    locust_compat.track_csv_writer()
    assert getattr(StatsCSVFileWriter.stats_writer, "_capacity_tracked", False)


def test_a_worker_still_hears_its_master_through_heartbeat_received_and_has_a_zmq_socket():
    # swarm/deadman.py: the master's answers arm and reset the switch; its stop uses stop_users;
    # its exit drops what is queued for a master gone for good (the socket's linger)
    source = inspect.getsource(runners.WorkerRunner.handle_message)
    assert "heartbeat_received.fire" in source
    assert callable(getattr(runners.Runner, "stop_users", None))
    assert "MASTER_HEARTBEAT_TIMEOUT" in inspect.getsource(runners.WorkerRunner.heartbeat_timeout_checker)
    from locust.rpc import zmqrpc

    assert "self.socket = context.socket" in inspect.getsource(zmqrpc.BaseSocket.__init__)


def test_a_worker_still_parses_locusts_defaults_per_option_of_a_spawn_message_and_once_here():
    # swarm/locust_compat.py, the fifth: the dict comprehension calls default_args_dict() per key
    from locust import argument_parser

    assert "argument_parser.default_args_dict()" in inspect.getsource(runners.WorkerRunner.handle_message)
    original = argument_parser.default_args_dict
    try:
        locust_compat.parse_locust_defaults_once()
        locust_compat.parse_locust_defaults_once()  # idempotent: one wrapper
        once = argument_parser.default_args_dict
        assert once.__wrapped__ is original
        first = once()
        first["num_users"] = "changed by a caller"
        assert once() == original() and once()["num_users"] is None  # the same defaults, a copy each time
    finally:
        argument_parser.default_args_dict = original
