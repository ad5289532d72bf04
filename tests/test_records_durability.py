"""A finished request is never lost, and a `kill -9` loses at most the last flush interval and the
writer's polite pace: records are written off the event loop by a native thread that flushes every
FLUSH_INTERVAL_S, at a pace that leaves the hub its core for at most POLITE_S of each flush."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from helpers.processes import Watch, locust_argv, popen
from helpers.results import read_records
from helpers.scenarios import write_corpus
from helpers.waiting import wait_until

from capacity_plugins.analysis.records import read_columnar
from capacity_plugins.sinks.records import FLUSH_INTERVAL_S, POLITE_S

pytestmark = pytest.mark.slow


def test_kill_9_loses_at_most_the_last_flush(fake_llm, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 1200)
    out = tmp_path / "out"
    p = popen(
        locust_argv(["--headless", "-u", "8", "-r", "8", "-t", "60s", "--host", fake_llm, "--corpus", str(corpus),
                     "--min-distinct", "1000", "--max-tokens", "16", "--results-dir", str(out), "--only-summary"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        path = out / "requests.jsonl"
        wait_until(lambda: path.stat().st_size >= 20_000, 30, "20 kB of records", Watch(p), interval=0.2)
        time.sleep(2.0)
        p.send_signal(signal.SIGKILL)
        killed = time.time()
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    recs = read_records(out)  # every line whole
    assert len(recs) > 50
    # the typed copy for the analysis is written in batches of thousands of records (none yet in
    # so short a run: then there is no file); after the kill its batches and the JSONL's lines
    # after them read as the JSONL's records, or the analysis does not use it
    copy = read_columnar(out, [])
    assert copy is None or list(copy.records["sent_unix"]) == [r["sent_unix"] for r in recs]
    last_end = max(r["sent_unix"] + r["e2e_ms"] / 1000.0 for r in recs)
    # finished more than a flush interval and the writer's polite pace before the kill → on disk
    # (0.5 s slack for a loaded box)
    assert last_end >= killed - FLUSH_INTERVAL_S - POLITE_S - 0.5, killed - last_end
