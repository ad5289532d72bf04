"""--processes 2 and master + 2 workers (real locust processes on loopback): one consolidated
requests.jsonl with every request, disjoint prompt shards, live merged percentiles == records',
secrets in no output file or log."""

import subprocess
import time

import orjson
import pytest
from fixtures_core import fake_llm, free_port, write_corpus  # noqa: F401
from locust_runs import (
    LOCUST,
    LOCUSTFILE,
    ROOT,
    env_with,
    llm_stats_rows,
    locust_request_count,
    nearest_rank,
    records,
    run_locust,
)

KEY = "sk-distributed-secret-789"
HDR = "hdr-distributed-secret-012"


def llm_args(url, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 1500)
    return ["--host", url, "--dialect", "openai-chat", "--model", "ok", "--corpus", str(corpus),
            "--min-distinct", "1000", "--max-tokens", "32", "--results-dir", str(tmp_path / "out"),
            "--api-key-env", "DIST_TEST_KEY", "--header", f"X-Api-Key: {HDR}"]


def check_run(tmp_path, logs: str, n_workers: int):
    out = tmp_path / "out"
    recs = records(out)
    n, failures = locust_request_count(tmp_path / "locust")
    finished = [r for r in recs if r["error_kind"] != "cancelled"]  # cancelled at the stop: records only
    assert len(finished) == n > 20, (len(recs), n, logs[-4000:])
    assert failures == sum(1 for r in finished if not r["ok"])
    assert {r["worker"] for r in recs} == set(range(n_workers))
    # disjoint shards: no prompt sent twice, and no prompt id shared between workers
    ids = [r["prompt_id"] for r in recs]
    assert len(set(ids)) == len(ids)
    by_worker = [{r["prompt_id"] for r in recs if r["worker"] == w} for w in range(n_workers)]
    assert not set.intersection(*by_worker)
    # live merged distributions equal the records' (same nearest-rank definition) within 1 %
    ok = [r for r in recs if r["ok"]]
    rows = llm_stats_rows(out)
    for metric in ("ttft", "tpot", "e2e"):
        values = [r[f"{metric}_ms"] for r in ok if r[f"{metric}_ms"] is not None]
        row = rows[("openai-chat", metric)]
        assert int(row["count"]) == len(values)
        for col, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99)):
            exact = nearest_rank(values, q)
            assert abs(float(row[col]) - exact) <= 0.01 * exact, (metric, col, row[col], exact)
    meta = orjson.loads((out / "meta.json").read_bytes())
    assert meta["records"]["lost"] == 0 and meta["records"]["written"] == len(recs)
    assert meta["corpus"]["sha256"] and meta["workers"]["count"] == n_workers
    for f in out.iterdir():
        text = f.read_text(errors="replace")
        assert KEY not in text and HDR not in text, f.name
    assert KEY not in logs and HDR not in logs


def test_processes_two(fake_llm, tmp_path):  # noqa: F811
    # an explicit free port: the default 5557 may be taken by another locust run on this machine
    port = str(free_port())
    args = ["--headless", "--processes", "2", "--master-bind-port", port, "--master-port", port, "-u", "4", "-r", "4", "-t", "4s", "--only-summary",
            "--json-file", str(tmp_path / "locust"), *llm_args(fake_llm, tmp_path)]
    p = run_locust(args, env=env_with(DIST_TEST_KEY=KEY))
    logs = p.stdout + p.stderr
    assert "Traceback" not in logs, logs[-3000:]
    check_run(tmp_path, logs, 2)


def test_master_and_two_workers(fake_llm, tmp_path):  # noqa: F811
    port = free_port()
    env = env_with(DIST_TEST_KEY=KEY)
    master = subprocess.Popen(
        [LOCUST, "-f", LOCUSTFILE, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--headless", "--expect-workers", "2", "-u", "4", "-r", "4", "-t", "4s", "--only-summary",
         "--json-file", str(tmp_path / "locust"), *llm_args(fake_llm, tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    time.sleep(0.5)
    # workers get no LLM options on their command line: they must take the master's
    workers = [
        subprocess.Popen([LOCUST, "-f", LOCUSTFILE, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    try:
        logs = master.communicate(timeout=90)[0]
        logs += "".join(w.communicate(timeout=30)[0] for w in workers)
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    assert "Traceback" not in logs, logs[-3000:]
    check_run(tmp_path, logs, 2)


def test_worker_with_a_different_corpus_refuses(fake_llm, tmp_path):  # noqa: F811
    port = free_port()
    env = env_with(DIST_TEST_KEY=KEY)
    args = llm_args(fake_llm, tmp_path)
    master = subprocess.Popen(
        [LOCUST, "-f", LOCUSTFILE, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--headless", "--expect-workers", "1", "-u", "2", "-r", "2", "-t", "20s", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    # the worker host has a different file at the same path: simulate by rewriting it after the master loaded it
    time.sleep(2.0)
    write_corpus(tmp_path / "c.jsonl", 1400)
    worker = subprocess.Popen([LOCUST, "-f", LOCUSTFILE, "--worker", "--master-port", str(port)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        logs = master.communicate(timeout=60)[0]
        logs += worker.communicate(timeout=30)[0]
    finally:
        for proc in (master, worker):
            if proc.poll() is None:
                proc.kill()
    assert master.returncode == 2, logs[-3000:]
    assert "sha256" in logs and "refus" in logs


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


def test_killed_worker_loses_at_most_its_last_second(fake_llm, tmp_path):  # noqa: F811
    import signal

    port = free_port()
    env = env_with(DIST_TEST_KEY=KEY)
    master = subprocess.Popen(
        [LOCUST, "-f", LOCUSTFILE, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--headless", "--expect-workers", "2", "-u", "4", "-r", "4", "-t", "7s", "--only-summary",
         *llm_args(fake_llm, tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    workers = [
        subprocess.Popen([LOCUST, "-f", LOCUSTFILE, "--worker", "--master-port", str(port)],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        deadline = time.time() + 30
        out = tmp_path / "out" / "requests.jsonl"
        # wait until both workers have shipped records, then kill one hard
        while time.time() < deadline:
            if out.exists() and {r["worker"] for r in records(tmp_path / "out")} == {0, 1}:
                break
            time.sleep(0.2)
        time.sleep(1.5)
        workers[1].send_signal(signal.SIGKILL)
        kill_unix = time.time()
        logs = master.communicate(timeout=90)[0]
        workers[0].communicate(timeout=30)
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    recs = records(tmp_path / "out")
    meta = orjson.loads((tmp_path / "out" / "meta.json").read_bytes())
    finals = {int(w): v["final_batch"] for w, v in meta["records"]["by_worker"].items()}
    assert sorted(finals.values()) == [False, True], meta["records"]
    dead = next(w for w, final in finals.items() if not final)
    dead_recs = [r for r in recs if r["worker"] == dead]
    last_end = max(r["sent_unix"] + r["e2e_ms"] / 1000.0 for r in dead_recs)
    # shipped at least every second: what the dead worker finished more than ~1 s before the kill
    # reached the master (0.5 s slack for a loaded box)
    assert last_end >= kill_unix - 1.5, (kill_unix - last_end, len(dead_recs))
    # what it made after its last batch never arrived: unknown, never reported as 0; the run is
    # incomplete (a smaller swarm measured part of it) and the master says so with exit 1
    assert meta["records"]["lost"] is None and "final batch" in meta["records"]["lost_reason"]
    assert meta["complete"] is False and [w["worker"] for w in meta["workers_lost"]] == [dead]
    assert master.returncode == 1, logs[-2000:]
    alive = [r for r in recs if r["worker"] != dead]
    assert max(r["sent_unix"] for r in alive) > kill_unix  # the swarm went on without it
    assert "Traceback" not in logs, logs[-3000:]
