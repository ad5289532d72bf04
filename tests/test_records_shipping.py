"""RecordsBatch: a worker's finished records on their way to the master (load/shipping.py)."""

from __future__ import annotations

import gevent
import msgpack

from capacity_plugins.contracts.records import RECORD_FIELDS, RequestRecord
from capacity_plugins.load.messages import RecordsBatch
from capacity_plugins.load.shipping import WorkerShipping
from capacity_plugins.sinks.records import RecordsSink


def _records(n: int) -> list[dict]:
    out = []
    for i in range(n):
        d = {name: None for name in RECORD_FIELDS}
        d.update(request_id=f"r{i}", worker=1, step=0, warmup=False, attempt=1, ok=True, status=200,
                 sent_unix=1.7e9 + i, ttft_ms=20.5, e2e_ms=300.25, itl_ms=[1.0 + k / 8 for k in range(255)],
                 output_tokens=256, stream=True)
        out.append(RequestRecord.from_dict(d).to_dict())
    return out


def test_a_batch_is_handed_to_the_wire_without_copying_its_records():
    """dataclasses.asdict deep-copied every record, each gap a copy.deepcopy call: ~0.5 s for a
    second's 1000 streamed records, on the worker's hub, in front of the reads it times."""
    records = _records(3)
    data = RecordsBatch(worker=1, records=records, produced=7, final=True).to_data()
    assert data["records"] is records and data["records"][2]["itl_ms"] is records[2]["itl_ms"]
    # what the master decodes from Locust's wire format (msgpack) is the same batch
    back = RecordsBatch.from_data(msgpack.unpackb(msgpack.packb(data)))
    assert back == RecordsBatch(worker=1, records=records, produced=7, final=True)


class _Runner:
    """Locust's runner as shipping sees it: what it sends."""

    def __init__(self) -> None:
        self.sent: list[RecordsBatch] = []

    def send_message(self, kind: str, data: dict, client_id: str | None = None) -> None:
        assert kind == RecordsBatch.TYPE
        self.sent.append(RecordsBatch.from_data(data))


def _worker_with(n: int, tmp_path) -> tuple[WorkerShipping, _Runner, list[dict]]:
    sink = RecordsSink(tmp_path, "worker")
    for d in _records(n):
        sink.add(RequestRecord.from_dict(d))
    runner = _Runner()
    return WorkerShipping(runner, sink, lambda: 1), runner, [r.to_dict() for r in map(RequestRecord.from_dict, _records(n))]


def test_records_go_in_small_messages_the_last_one_final(tmp_path):
    """Locust encodes a message in one piece on the worker's hub (8-11 ms for 1000 streamed
    records): a worker's records leave in messages of at most SHIP_MAX_RECORDS."""
    shipping, runner, records = _worker_with(150, tmp_path)
    shipping.ship(final=False)
    assert [len(b.records) for b in runner.sent] == [64, 64, 22] and not any(b.final for b in runner.sent)
    assert [r for b in runner.sent for r in b.records] == records
    assert all(b.produced == 150 and b.worker == 1 for b in runner.sent)
    shipping.ship(final=False)  # nothing waiting: nothing sent
    assert len(runner.sent) == 3
    shipping.ship(final=True)  # a stop with nothing waiting still says it is the last
    assert len(runner.sent) == 4 and runner.sent[-1].final and runner.sent[-1].records == []


def test_a_stop_while_the_loop_lets_the_hub_run_loses_nothing(tmp_path):
    """The shipping loop yields between messages; a stop then ships the rest with the final flag
    and kills the loop. Records are taken a message at a time, so none is held by the killed loop."""
    shipping, runner, records = _worker_with(300, tmp_path)
    loop = gevent.spawn(shipping.ship, final=False)
    gevent.sleep(0)  # the loop sent its first message and yields
    assert len(runner.sent) == 1
    shipping.ship(final=True)
    loop.kill()
    assert [r for b in runner.sent for r in b.records] == records
    assert runner.sent[-1].final and not any(b.final for b in runner.sent[:-1])
