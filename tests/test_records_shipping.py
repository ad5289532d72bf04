"""RecordsBatch: a worker's finished records on their way to the master (load/shipping.py)."""

from __future__ import annotations

import msgpack

from capacity_plugins.contracts.records import RECORD_FIELDS, RequestRecord
from capacity_plugins.load.messages import RecordsBatch


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
