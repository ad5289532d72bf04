"""The Locust-side wiring: plain `locust --scenario`, a real master + 2 workers swarm, a CPU-starved
generator flagged client_limited, and plain -u/-t runs untouched when no scenario is given."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest
from helpers.paths import ROOT, TESTS
from helpers.ports import free_port
from helpers.processes import CAPACITY, LOCUST, popen, run, stop
from helpers.results import only_folder, read_meta, read_records, read_steps
from helpers.scenarios import write_scenario

pytestmark = pytest.mark.slow

LOCUSTFILE = ROOT / "capacity_plugins" / "locustfile.py"
HOG = TESTS / "data_rehearsal" / "hog_locustfile.py"


def locust(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return run([*LOCUST, *args], timeout=timeout)


@pytest.mark.alone
def test_plain_locust_with_scenario_and_cpu_starved_step_flagged(tmp_path, start_simulator):
    sim = start_simulator(max_num_seqs=16)
    sc = write_scenario(
        tmp_path,
        "hog",
        target={"url": sim.url, "model": "sim-model"},
        request={"max_tokens": 4, "timeout_s": 10},
        load={"kind": "rate_sweep", "levels": [10, 10], "step_s": 5, "warmup_s": 1, "max_concurrency": 16},
    )
    r = locust("-f", str(HOG), "--headless", "--scenario", str(sc), "--exit-code-on-error", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    folder = only_folder(tmp_path / "results")  # the scenario's output/<name>-<timestamp>
    assert folder.name.startswith("hog-")
    steps = read_steps(folder)
    assert [s["level"] for s in steps] == [10, 10]
    for s in steps:
        print({k: s[k] for k in ("level", "offered_rps", "sent_rps", "achieved_rps", "schedule_lag_p99_ms", "client_cpu_max_pct", "client_limited_reason")})
    calm, starved = steps
    assert calm["client_limited"] is False, calm
    assert starved["client_limited"] is True, starved
    assert "lag p99" in starved["client_limited_reason"] or "CPU" in starved["client_limited_reason"]
    assert starved["schedule_lag_p99_ms"] > calm["schedule_lag_p99_ms"]
    # the scenario's request settings reached the plugin without any plugin flag
    meta = read_meta(folder)
    assert meta["options"]["max_tokens"] == 4 and meta["model"] == "sim-model"


def test_master_and_two_workers_one_consolidated_result(tmp_path):
    port = free_port()
    sc = write_scenario(
        tmp_path,
        "swarm",
        target={"url": "embedded", "simulator": {"max_num_seqs": 8}},
        corpus={"min_distinct": 50},
        request={"max_tokens": 8, "timeout_s": 10},
        load={"kind": "concurrency_sweep", "levels": [2, 4], "step_s": 3, "warmup_s": 1},
    )
    master = popen([*CAPACITY, "run", str(sc), "--master", "--expect-workers", "2", "--master-bind-port", str(port),
                    "--no-analyze"], stderr=subprocess.PIPE)
    workers = [popen([*CAPACITY, "run", str(sc), "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                     stderr=subprocess.PIPE) for _ in range(2)]
    try:
        out, err = master.communicate(timeout=120)
        w_rcs = [w.wait(timeout=30) for w in workers]
    finally:
        stop(master, *workers)
    assert master.returncode == 0, err[-3000:]
    assert w_rcs == [0, 0]
    folder = only_folder(tmp_path / "results")
    steps = read_steps(folder)
    assert [s["level"] for s in steps] == [2, 4] and all(s["client_cpu_max_pct"] is not None for s in steps)
    recs = read_records(folder)
    assert set(Counter(r["worker"] for r in recs)) == {0, 1}
    assert {r["step"] for r in recs} == {0, 1}
    prompts = [{r["prompt_id"] for r in recs if r["worker"] == w} for w in (0, 1)]
    assert not prompts[0] & prompts[1]
    meta = read_meta(folder)
    assert meta["complete"] is True and meta["records"]["lost"] == 0
    # every worker's own CPU and memory sit next to the server's series, on the worker's host;
    # the master's own sit beside them (it generates nothing, but a starved master shows there)
    import csv
    import socket

    with (folder / "telemetry_series.csv").open() as f:
        client = [r for r in csv.DictReader(f) if r["series"].startswith("client_")]
    for series in ("client_cpu_pct", "client_rss_bytes"):
        rows = [r for r in client if r["series"] == series]
        assert {r["device"] for r in rows} - {"master"} == {"worker-0", "worker-1"}, series
        assert {r["host"] for r in rows} == {socket.gethostname()}
    assert all(float(r["value"]) > 1e6 for r in client if r["series"] == "client_rss_bytes")
    # provenance from the scraped server lands in meta.json
    assert meta["telemetry"]["provenance"], meta.get("telemetry")


def test_without_scenario_plain_users_and_run_time_still_work(tmp_path, start_simulator):
    sim = start_simulator()
    out = tmp_path / "plain"
    r = locust(
        "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2", "-t", "3s", "--host", sim.url,
        "--model", "sim-model", "--min-distinct", "10", "--max-tokens", "4", "--results-dir", str(out),
        "--exit-code-on-error", "0",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    recs = read_records(out)
    assert recs and all(r["step"] is None for r in recs)  # no shape, no steps
    assert not (out / "steps.json").exists()
