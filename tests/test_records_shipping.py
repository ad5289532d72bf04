"""A worker's finished records on their way to the master (sinks/records.py, swarm/shipping.py).

The worker's writer thread turns its records into requests.jsonl lines; the hub only hands those
bytes to Locust's msgpack. Shipped as dicts, the encoding took 8-11 ms in one piece for a second's
1 000 streamed records, and the records waiting for it (a dict and a list of 255 gaps each) were
walked by every garbage collection meanwhile — both on the hub, in front of the reads it times.
"""

from __future__ import annotations

import gc

import msgpack
import orjson

from capacity_plugins.contracts.records import RECORD_FIELDS, RequestRecord
from capacity_plugins.contracts.redaction import Secrets
from capacity_plugins.sinks.records import WRITE_SLICE, RecordsSink
from capacity_plugins.swarm.messages import RecordsBatch
from tests.helpers.waiting import wait_until


def _records(n: int, key: str = "") -> list[RequestRecord]:
    out = []
    for i in range(n):
        d = {name: None for name in RECORD_FIELDS}
        d.update(request_id=f"r{i}", worker=1, step=0, warmup=False, attempt=1, ok=i % 5 != 0, status=200,
                 sent_unix=1.7e9 + i, ttft_ms=20.5, e2e_ms=300.25, itl_ms=[1.0 + k / 8 for k in range(255)],
                 output_tokens=256, stream=True, error=f"echoed {key}" if key and i % 5 == 0 else None)
        out.append(RequestRecord.from_dict(d))
    return out


def _lines_waiting(worker: RecordsSink) -> int:
    return sum(p.count(b"\n") for p in list(worker._outbox))


def test_a_worker_ships_the_lines_a_local_run_writes_and_the_master_writes_them_as_they_came(tmp_path):
    records = _records(100, key="sk-live-123")
    secrets = Secrets(["sk-live-123"])
    worker = RecordsSink(tmp_path / "w", "worker", secrets)
    worker.open()
    for r in records:
        worker.add(r)
    wait_until(lambda: _lines_waiting(worker) == 100, 10, "the worker's writer thread")
    pieces = worker.take_batch()
    assert pieces and all(p.count(b"\n") <= WRITE_SLICE for p in pieces)
    worker.close()
    assert not (tmp_path / "w").exists()  # a worker writes no file
    lines = b"".join(pieces)
    assert b"sk-live-123" not in lines and lines.count(b"\n") == 100
    assert lines == secrets.scrub_bytes(b"".join(r.to_json_bytes() for r in records))

    # through Locust's wire format (msgpack) to the master
    data = msgpack.unpackb(msgpack.packb(RecordsBatch(worker=1, lines=pieces, produced=100, final=True).to_data()))
    batch = RecordsBatch.from_data(data)
    seen: list[RequestRecord] = []
    master = RecordsSink(tmp_path / "m", "master", Secrets(), emit=seen.append)
    master.open()
    master.receive(batch.worker, batch.lines, batch.produced, batch.final)
    master.close()
    assert (tmp_path / "m" / "requests.jsonl").read_bytes() == lines
    assert [r.request_id for r in seen] == [r.request_id for r in records]
    assert seen[3].itl_ms == records[3].itl_ms
    acc = master.accounting()
    assert acc["received"] == acc["produced_reported"] == 100 and acc["lost"] == 0
    # and requests.arrow holds the same records: the analysis reads them from it
    from capacity_plugins.analysis.records import read_columnar

    copy = read_columnar(tmp_path / "m", [0])
    assert copy is not None and copy.jsonl_tail == 0 and copy.records.count == 100
    frame = copy.records.frame(["sent_unix", "ok", "ttft_ms"])
    assert frame["sent_unix"].tolist() == [r.sent_unix for r in records]
    assert frame["ok"].tolist() == [r.ok for r in records]


def test_records_waiting_to_be_shipped_are_bytes_the_collector_never_walks(tmp_path):
    worker = RecordsSink(tmp_path, "worker")
    worker.open()
    for r in _records(200):
        worker.add(r)
    wait_until(lambda: _lines_waiting(worker) == 200, 10, "the worker's writer thread")
    assert worker._outbox and not any(gc.is_tracked(p) for p in worker._outbox)
    worker.close()


def test_the_final_batch_holds_every_record_added_before_it(tmp_path):
    worker = RecordsSink(tmp_path, "worker")
    worker.open()
    records = _records(30)
    for r in records:
        worker.add(r)
    lines = b"".join(worker.take_batch(final=True))  # the writer thread may not have run yet
    assert [orjson.loads(x)["request_id"] for x in lines.splitlines()] == [r.request_id for r in records]
    worker.close()


def test_a_piece_the_master_cannot_read_is_counted_lost_not_fatal(tmp_path):
    master = RecordsSink(tmp_path, "master")
    master.open()
    good = b"".join(r.to_json_bytes() for r in _records(3))
    master.receive(2, [good, b'{"request_id": "x"\n'], produced=5, final=True)
    master.close()
    assert (tmp_path / "requests.jsonl").read_bytes() == good
    assert master.accounting()["lost"] == 2
