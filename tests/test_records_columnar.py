"""requests.arrow: the records sink's typed copy of the analysis's columns (sinks/columnar.py).

The analysis must read from it exactly what it reads from requests.jsonl, and must not use it
when it does not hold exactly the JSONL's records (a run killed mid-batch, a line appended after).
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from capacity_plugins.analysis.records import read_columnar, read_requests
from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
from capacity_plugins.contracts.records import ERROR_KINDS, RECORD_FIELDS, RequestRecord
from capacity_plugins.sinks.records import RecordsSink


def _record(i: int, rng: random.Random) -> RequestRecord:
    """A record with every shape the analysis meets: failures, missing numbers, classes, turns."""
    kind = rng.choice([None, None, None, *ERROR_KINDS])
    d = {name: None for name in RECORD_FIELDS}
    d.update(
        request_id=f"r{i}", worker=i % 3, step=rng.choice([None, 0, 1, 2]), warmup=rng.random() < 0.1, attempt=1,
        ok=kind is None, status=200 if kind is None else 500, error_kind=kind,
        error=None if kind is None else "the server's text", sent_unix=1.7e9 + i * 0.01,
        scheduled_unix=rng.choice([None, 1.7e9 + i * 0.01]), ttft_ms=None if kind else rng.uniform(10, 90),
        e2e_ms=rng.uniform(100, 900), tpot_ms=None if kind else rng.uniform(5, 20),
        itl_ms=[] if kind else [round(rng.uniform(1, 30), 3) for _ in range(rng.randint(0, 40))],
        prompt_tokens=rng.choice([None, 120]), output_tokens=None if kind else rng.randint(1, 40),
        workload=rng.choice([None, "chat", "rag"]), turn=rng.choice([None, 1, 2]), stream=True,
    )
    return RequestRecord.from_dict(d)


def _write(folder, records, role="local"):
    sink = RecordsSink(folder, role)
    sink.open()
    if role == "local":
        for r in records:
            sink.add(r)
            if int(r.request_id[1:]) % 97 == 0:
                sink.flush()  # several batches, as a run's writer thread makes
    else:  # a master writes what workers ship: dicts
        sink.receive(0, [r.to_dict() for r in records], len(records), final=True)
    sink.close()


@pytest.mark.parametrize("role", ["local", "master"])
def test_the_analysis_reads_the_same_records_from_the_typed_copy(tmp_path, role):
    rng = random.Random(7)
    records = [_record(i, rng) for i in range(1000)]
    _write(tmp_path, records, role)
    assert (tmp_path / COLUMNAR_FILE).exists()
    got = read_columnar(tmp_path)
    assert got is not None
    df, vals, lens = got
    ref_df, ref_vals, ref_lens, torn = read_requests(tmp_path / RECORDS_FILE, with_itl=True)
    assert not torn
    pd.testing.assert_frame_equal(df, ref_df, check_dtype=True)
    assert np.array_equal(lens, ref_lens) and np.array_equal(vals, ref_vals)
    assert vals.dtype == ref_vals.dtype == np.float32


def test_a_copy_cut_mid_batch_or_a_json_line_added_after_it_is_not_used(tmp_path):
    rng = random.Random(8)
    _write(tmp_path, [_record(i, rng) for i in range(500)])
    arrow, jsonl = tmp_path / COLUMNAR_FILE, tmp_path / RECORDS_FILE
    whole = arrow.read_bytes()
    # a record written after the copy was closed (a straggler at quit): in the JSONL only
    with jsonl.open("ab") as f:
        f.write(_record(500, rng).to_json_bytes())
    assert read_columnar(tmp_path) is None
    # the same JSONL without it, but a copy cut inside its last batch (kill -9 mid-write): its
    # whole batches stand, yet they end before the JSONL does
    jsonl.write_bytes(jsonl.read_bytes().rsplit(b"\n", 2)[0] + b"\n")
    assert read_columnar(tmp_path) is not None
    arrow.write_bytes(whole[: len(whole) - 200])
    assert read_columnar(tmp_path) is None
    # not Arrow at all
    arrow.write_bytes(b"garbage")
    assert read_columnar(tmp_path) is None
    # a JSONL edited in place (same size, another last record) is caught by its last request
    arrow.write_bytes(whole)
    text = jsonl.read_bytes()
    jsonl.write_bytes(text.replace(b'"request_id":"r499"', b'"request_id":"x499"'))
    assert read_columnar(tmp_path) is None


def test_a_copy_that_starts_after_the_jsonl_does_is_not_used(tmp_path):
    """A second writer appending to a folder's requests.jsonl starts its own copy: it lacks the
    first writer's records, so the analysis must not take it for the whole run."""
    rng = random.Random(10)
    _write(tmp_path, [_record(i, rng) for i in range(100)])
    assert read_columnar(tmp_path) is not None
    _write(tmp_path, [_record(i, rng) for i in range(100, 150)])
    assert len((tmp_path / RECORDS_FILE).read_bytes().splitlines()) == 150
    assert read_columnar(tmp_path) is None


def test_no_free_text_reaches_the_typed_copy(tmp_path):
    """Error messages can carry a server's echo of a key: the copy has none of them."""
    rng = random.Random(9)
    _write(tmp_path, [_record(i, rng) for i in range(200)])
    assert b"the server's text" in (tmp_path / RECORDS_FILE).read_bytes()
    assert b"the server's text" not in (tmp_path / COLUMNAR_FILE).read_bytes()
