"""requests.arrow: the records sink's typed copy of the analysis's columns (sinks/columnar.py).

The analysis must read from it exactly what it reads from requests.jsonl: the part of the JSONL
its batches hold exactly from the copy, the lines after that part (a run killed before its last
batch, a line appended after) from the JSONL; and not use it when it holds no such part.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pandas as pd
import pytest

from capacity_plugins.analysis import gaps as gaps_module
from capacity_plugins.analysis import records as records_module
from capacity_plugins.analysis.gaps import by_step
from capacity_plugins.analysis.intervals import quantiles_ci
from capacity_plugins.analysis.load import load_run
from capacity_plugins.analysis.pipeline import summarise
from capacity_plugins.analysis.records import read_columnar, read_requests
from capacity_plugins.analysis.step_records import batches as _batches
from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
from capacity_plugins.contracts.records import (
    ERROR_KINDS,
    JSONL_BYTES,
    JSONL_FROM,
    RECORD_FIELDS,
    RequestRecord,
)
from capacity_plugins.errors import UserError
from capacity_plugins.sinks import columnar
from capacity_plugins.sinks.columnar import ColumnarWriter
from capacity_plugins.sinks.records import RecordsSink
from tests.helpers.analysis_data import make_results, with_typed_copy
from tests.helpers.waiting import wait_until


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
    else:  # a master writes what workers ship: their JSON lines
        sink.receive(0, [r.to_json_bytes() for r in records], len(records), final=True)
    sink.close()


STEPS = [0, 1, 2]


def _read(folder):
    return read_columnar(folder, STEPS)


@pytest.mark.parametrize("role", ["local", "master"])
def test_the_analysis_reads_the_same_records_from_the_typed_copy(tmp_path, role):
    rng = random.Random(7)
    records = [_record(i, rng) for i in range(1000)]
    _write(tmp_path, records, role)
    _assert_the_copy_reads_as_the_jsonl(tmp_path)


def test_the_writer_threads_paced_drains_write_the_same_copy(tmp_path):
    """The writer thread drains in slices (host.py GilShare), the gaps converted a
    few records at a time: the copy is the one a single conversion makes."""
    rng = random.Random(11)
    records = [_record(i, rng) for i in range(400)]
    sink = RecordsSink(tmp_path, "local")
    sink.open()
    for r in records:
        sink.add(r)
    wait_until(lambda: sink.written == len(records), 30, "the writer thread's drain")
    sink.close()
    _assert_the_copy_reads_as_the_jsonl(tmp_path)


def _assert_the_copy_reads_as_the_jsonl(tmp_path, torn=False):
    assert (tmp_path / COLUMNAR_FILE).exists()
    got = _read(tmp_path)
    assert got is not None and got.torn == torn
    df, gaps = got.records.frame(), got.itl
    ref_df, ref_vals, ref_lens, ref_torn = read_requests(tmp_path / RECORDS_FILE, with_itl=True)
    assert ref_torn == torn
    # the same columns, values and dtypes, less the request ids nothing downstream reads
    pd.testing.assert_frame_equal(df, ref_df.drop(columns=["request_id"]), check_dtype=True)
    good = ref_df["ok"].to_numpy() & ~ref_df["warmup"].to_numpy()
    tags = np.repeat(np.where(good, ref_df["step"].to_numpy(), -1), ref_lens)
    ref = by_step(ref_vals, tags, STEPS)
    assert set(gaps) == set(STEPS) and {i for i in STEPS if gaps[i].size} == set(ref)
    for i, g in ref.items():
        assert gaps[i].counts is None and gaps[i].values.dtype == np.float32
        assert np.array_equal(gaps[i].values, g.values)


def test_a_step_with_many_gaps_is_counted_by_value_with_the_same_percentiles(tmp_path, monkeypatch):
    """Past RAW_MAX the steps keep (value, count) pairs: memory bounded by the distinct gaps, the
    percentiles, their intervals and the SLO share exactly those of the raw gaps."""
    monkeypatch.setattr(gaps_module, "RAW_MAX", 500)
    rng = random.Random(11)
    _write(tmp_path, [_record(i, rng) for i in range(1000)])
    gaps = _read(tmp_path).itl
    ref_df, ref_vals, ref_lens, _ = read_requests(tmp_path / RECORDS_FILE, with_itl=True)
    good = ref_df["ok"].to_numpy() & ~ref_df["warmup"].to_numpy()
    ref = by_step(ref_vals, np.repeat(np.where(good, ref_df["step"].to_numpy(), -1), ref_lens), STEPS)
    for i in STEPS:
        counted, raw = gaps[i], ref[i]
        assert counted.counts is not None and counted.values.size < raw.values.size  # counted: 0.001 ms grid
        assert counted.size == raw.size
        for n_eff in (None, 40, raw.size // 3):
            assert quantiles_ci(counted.values, [0.5, 0.9, 0.95, 0.99, 1.0], 0.95, n_eff, counts=counted.counts) == \
                quantiles_ci(raw.values, [0.5, 0.9, 0.95, 0.99, 1.0], 0.95, n_eff)
        for limit in (0.5, 7.0, 15.123, 29.9, 31.0):
            assert counted.share_at_most(limit) == raw.share_at_most(limit)


@pytest.fixture
def parsed(monkeypatch):
    """The byte ranges of requests.jsonl the analysis parses as JSON."""
    ranges: list[tuple[int, int | None]] = []
    real = records_module._json_blocks

    def spy(f, limit, start=0):
        ranges.append((start, limit))
        return real(f, limit, start)

    monkeypatch.setattr(records_module, "_json_blocks", spy)
    return ranges


def test_the_jsonl_lines_after_the_copy_are_read_from_the_jsonl_and_only_they(tmp_path, monkeypatch, parsed):
    """A run killed before its last batch was written, or a straggler line written after the copy
    closed, leaves records the copy lacks: its batches stand, and only the lines after them are
    parsed — a killed soak's analysis needs no more memory than a whole one's."""
    monkeypatch.setattr(columnar, "BATCH_ROWS", 120)
    rng = random.Random(8)
    _write(tmp_path, [_record(i, rng) for i in range(500)])
    arrow, jsonl = tmp_path / COLUMNAR_FILE, tmp_path / RECORDS_FILE
    whole, size = arrow.read_bytes(), jsonl.stat().st_size
    ranges = _batch_ranges(arrow)
    assert len(ranges) >= 2
    assert _read(tmp_path).jsonl_tail == 0 and parsed == []
    _assert_the_copy_reads_as_the_jsonl(tmp_path)
    # a record written after the copy was closed (a straggler at quit): in the JSONL only
    with jsonl.open("ab") as f:
        f.write(_record(500, rng).to_json_bytes())
    parsed.clear()
    assert _read(tmp_path).jsonl_tail == 1 and parsed == [(size, jsonl.stat().st_size)]
    _assert_the_copy_reads_as_the_jsonl(tmp_path)
    # a copy cut inside its last batch (kill -9 mid-write): the whole batches before it stand
    arrow.write_bytes(whole[: len(whole) - 200])
    parsed.clear()
    assert _read(tmp_path).jsonl_tail == ranges[-1][0] + 1 and parsed == [(ranges[-1][1], jsonl.stat().st_size)]
    _assert_the_copy_reads_as_the_jsonl(tmp_path)
    # and the JSONL's last line cut too: skipped and said, as when the JSONL is read alone
    with jsonl.open("ab") as f:
        f.write(_record(501, rng).to_json_bytes()[:40])
    assert _read(tmp_path).jsonl_tail == ranges[-1][0] + 1
    _assert_the_copy_reads_as_the_jsonl(tmp_path, torn=True)


def test_a_gap_in_the_copys_ranges_ends_the_part_it_is_read_for(tmp_path, parsed):
    """Batches after a gap in the byte ranges (a batch the copy never got) are not used: the
    JSONL is read from the gap on."""
    folder = make_results(tmp_path / "run", levels=[1, 2], rps=[3, 5], e2e_p50_ms=[300, 400],
                          e2e_p99_ms=[500, 700], itl_gaps=12, error_rate=[0, 0.1])
    with_typed_copy(folder, skip={2})
    (rows, _start, end), after_gap = _batch_ranges(folder / COLUMNAR_FILE)
    assert rows == 100 and after_gap[1] > end  # chunks 0-1, then the batch after the gap
    got = read_columnar(folder, STEPS)
    assert got.records.count - 100 == got.jsonl_tail and parsed == [(end, (folder / RECORDS_FILE).stat().st_size)]
    _assert_the_copy_reads_as_the_jsonl(folder)


@pytest.mark.parametrize(("line", "said"), [
    (b'{"request_id": "r51", "ok": "yes"}', r"^requests.jsonl line 52: field ok"),
    (b'{"request_id": "r51", "itl_ms": "x"}', r"^requests.jsonl line 52: field itl_ms"),
    (b'{"request_id": 51, "workload": 7}', r"^requests.jsonl: could not be read"),  # no line to name: types
])
def test_a_bad_line_after_the_copy_is_one_clear_error(tmp_path, line, said):
    rng = random.Random(9)
    _write(tmp_path, [_record(i, rng) for i in range(50)])
    jsonl = tmp_path / RECORDS_FILE
    with jsonl.open("ab") as f:
        f.write(_record(50, rng).to_json_bytes() + line + b"\n")
    with pytest.raises(UserError, match=said):
        _read(tmp_path)


def test_a_copy_that_does_not_match_the_jsonl_is_not_used(tmp_path):
    rng = random.Random(8)
    _write(tmp_path, [_record(i, rng) for i in range(500)])
    arrow, jsonl = tmp_path / COLUMNAR_FILE, tmp_path / RECORDS_FILE
    whole = arrow.read_bytes()
    assert _read(tmp_path) is not None
    # cut inside its only batch: no records at all
    arrow.write_bytes(whole[: len(whole) - 200])
    assert _read(tmp_path) is None
    # not Arrow at all
    arrow.write_bytes(b"garbage")
    assert _read(tmp_path) is None
    # a JSONL edited in place (same size, another last record) is caught by its last request
    arrow.write_bytes(whole)
    text = jsonl.read_bytes()
    jsonl.write_bytes(text.replace(b'"request_id":"r499"', b'"request_id":"x499"'))
    assert _read(tmp_path) is None
    # a JSONL shorter than the copy says
    jsonl.write_bytes(text[:-10])
    assert _read(tmp_path) is None


def test_a_copy_that_starts_after_the_jsonl_does_is_not_used(tmp_path):
    """A second writer appending to a folder's requests.jsonl starts its own copy: it lacks the
    first writer's records, so the analysis must not take it for the whole run."""
    rng = random.Random(10)
    _write(tmp_path, [_record(i, rng) for i in range(100)])
    assert _read(tmp_path) is not None
    _write(tmp_path, [_record(i, rng) for i in range(100, 150)])
    assert len((tmp_path / RECORDS_FILE).read_bytes().splitlines()) == 150
    assert _read(tmp_path) is None


def test_no_free_text_reaches_the_typed_copy(tmp_path):
    """Error messages can carry a server's echo of a key: the copy has none of them."""
    rng = random.Random(9)
    _write(tmp_path, [_record(i, rng) for i in range(200)])
    assert b"the server's text" in (tmp_path / RECORDS_FILE).read_bytes()
    assert b"the server's text" not in (tmp_path / COLUMNAR_FILE).read_bytes()


def test_the_summary_is_the_same_from_the_jsonl_the_raw_gaps_and_the_counted_gaps(tmp_path, monkeypatch):
    """End to end: every step's row — ITL percentiles, their intervals, the ITL SLO's share and
    judgement — is identical whichever way the records were read."""
    folder = with_typed_copy(make_results(
        tmp_path / "run", levels=[1, 2, 4], rps=[3, 5, 6], e2e_p50_ms=[300, 400, 900], e2e_p99_ms=[500, 700, 2000],
        itl_gaps=12, error_rate=[0, 0.1, 0.2], slo={"e2e_p95_ms": 1500.0, "itl_p95_ms": 12.0}))
    views = {}
    views["typed copy, raw gaps"] = summarise(load_run(folder)).steps
    monkeypatch.setattr(gaps_module, "RAW_MAX", 100)
    run = load_run(folder)
    assert all(g.counts is not None for g in run.itl.values())
    views["typed copy, counted gaps"] = summarise(run).steps
    with_typed_copy(folder, skip={3})  # batches up to a gap, then the JSONL's lines
    run = load_run(folder)
    assert all(g.counts is not None for g in run.itl.values())
    views["typed copy up to a gap, requests.jsonl after it"] = summarise(run).steps
    (folder / COLUMNAR_FILE).unlink()
    views["requests.jsonl"] = summarise(load_run(folder)).steps
    (first, a), *rest = views.items()
    assert all(r.itl_p95_ms and r.slo["itl_ms"].attainment is not None for r in a)
    for name, b in rest:
        assert [r.dumps() for r in b] == [r.dumps() for r in a], f"{name} differs from {first}"


def _streamed(i: int) -> RequestRecord:
    """A 256-token streamed answer's record (255 gaps): a busy worker's ~1000 a second."""
    d = {name: None for name in RECORD_FIELDS}
    d.update(request_id=f"r{i}", worker=0, step=1, warmup=False, attempt=1, ok=True, status=200,
             sent_unix=1.7e9 + i * 0.01, ttft_ms=20.5, e2e_ms=300.25, tpot_ms=1.125,
             itl_ms=[1.0 + (i + k) % 7 / 8 for k in range(255)], output_tokens=256, stream=True)
    return RequestRecord.from_dict(d)


def test_a_drain_writes_in_pieces_the_hub_can_read_between(tmp_path, monkeypatch):
    """Between two `share()` calls (where the writer thread lets the hub run) a drain writes at most
    16 records' lines and 64 KiB of the typed copy: 200 records written in one piece took ~2 ms of
    a worker's only core, and first tokens waiting behind it were stamped a decode step late
    (host.py GilShare)."""
    records = [_streamed(i) for i in range(200)]
    jsonl = tmp_path / RECORDS_FILE
    sink = RecordsSink(tmp_path, "local")  # not opened: no writer thread, the drain runs here
    lines_at: list[int] = []

    def count_lines() -> None:
        lines_at.append(jsonl.read_bytes().count(b"\n") if jsonl.exists() else 0)

    for r in records:
        sink.add(r)
    sink._drain(count_lines)
    sink.close()
    assert jsonl.read_bytes().count(b"\n") == len(records)
    assert max(b - a for a, b in zip([0, *lines_at], lines_at, strict=False)) <= 16

    arrow = tmp_path / COLUMNAR_FILE
    sizes: list[int] = []
    monkeypatch.setattr(columnar, "BATCH_ROWS", len(records))  # the batch is written in this drain
    writer = ColumnarWriter(arrow)
    writer.write(records, 0, jsonl.stat().st_size, lambda: sizes.append(arrow.stat().st_size if arrow.exists() else 0))
    assert sizes[-1] > 200 * 255 * 4  # the gaps are all there (float32), written in the drain
    writer.close()
    # a slice, plus the small parts (message headers) the file's buffer held until it
    assert max(b - a for a, b in zip([0, *sizes], sizes, strict=False)) <= 64 * 1024 + io.DEFAULT_BUFFER_SIZE
    assert _read(tmp_path) is not None  # and the copy is whole: it matches requests.jsonl


def _batch_ranges(arrow) -> list[tuple[int, int, int]]:
    """(rows, jsonl_from, jsonl_bytes) of each batch in requests.arrow."""
    import pyarrow as pa

    with pa.memory_map(str(arrow)) as source:
        return [(batch.num_rows, int(meta[JSONL_FROM]), int(meta[JSONL_BYTES]))
                for batch, meta in _batches(pa, source)]


def test_drains_are_gathered_into_big_batches(tmp_path, monkeypatch):
    """The writer thread drains every 50 ms (~50 records at a worker's full ingest); reading a
    batch costs the analysis the same whatever its rows, so drains are gathered into batches of
    BATCH_ROWS records (fewer at close, or when their gaps reach BATCH_GAPS)."""
    monkeypatch.setattr(columnar, "BATCH_ROWS", 300)
    rng = random.Random(12)
    records = [_record(i, rng) for i in range(1000)]
    sink = RecordsSink(tmp_path, "local")
    sink.open()
    for k in range(0, len(records), 50):
        for r in records[k:k + 50]:
            sink.add(r)
        sink.flush()  # a drain of at most 50 (the writer thread may take some first)
    sink.close()
    size = (tmp_path / RECORDS_FILE).stat().st_size
    ranges = _batch_ranges(tmp_path / COLUMNAR_FILE)
    rows = [n for n, _, _ in ranges]
    assert sum(rows) == 1000 and len(rows) in (3, 4)  # many drains a batch, the rest at close
    assert all(300 <= n < 350 for n in rows[:3])
    assert ranges[0][1] == 0 and ranges[-1][2] == size
    assert all(a[2] == b[1] for a, b in zip(ranges, ranges[1:], strict=False))  # no gap between
    _assert_the_copy_reads_as_the_jsonl(tmp_path)

    monkeypatch.setattr(columnar, "BATCH_GAPS", 3 * 255)  # long answers: fewer rows a batch
    writer = ColumnarWriter(tmp_path / "long.arrow")
    writer.write([_streamed(i) for i in range(2)], 0, 100)
    assert writer.rows == 0  # 510 gaps wait
    writer.write([_streamed(i) for i in range(2, 4)], 100, 200)
    assert writer.rows == 4 and writer._rows is None  # 1020: written at the end of that drain
    writer.write([_streamed(4)], 200, 250)
    writer.close()
    assert _batch_ranges(tmp_path / "long.arrow") == [(4, 0, 200), (1, 200, 250)]


def test_records_between_batches_cost_the_garbage_collector_nothing_per_gap(tmp_path):
    """Records waiting for a batch used to stay as they were, and every collection that ran while
    they waited walked each of their gaps (255 visits a streamed record, each a cache miss): the
    pauses grew with the records waiting, and the hub's reads waited behind them. They wait as
    typed arrays now: what the collector walks does not grow with their gaps."""
    import gc

    def walked(writer: ColumnarWriter) -> int:
        """References the collector follows through the waiting rows' own containers (the Python
        lists, tuples, dicts and records they hold; Arrow arrays and buffers hold none)."""
        todo, visits = list(vars(writer._rows).values()), 0
        while todo:
            o = todo.pop()
            if gc.is_tracked(o) and isinstance(o, list | tuple | dict | RequestRecord):
                refs = gc.get_referents(o)
                visits += len(refs)
                todo.extend(refs)
        return visits

    few, many = ColumnarWriter(tmp_path / "a.arrow"), ColumnarWriter(tmp_path / "b.arrow")
    few.write([_streamed(i) for i in range(10)], 0, 1)
    many.write([_streamed(i) for i in range(1000)], 0, 1)
    assert many._rows is not None and many._rows.count == 1000 and len(many._rows.gaps) == 1000 * 255
    assert walked(many) == walked(few) < 200  # per drain and column, not per record or gap
    few.close()
    many.close()


def test_a_batch_never_spans_a_gap_in_the_jsonl(tmp_path):
    """Rows whose JSONL range does not follow the waiting rows' (another writer's lines between)
    end the batch: each batch's range stays exactly its records' bytes."""
    rng = random.Random(13)
    writer = ColumnarWriter(tmp_path / COLUMNAR_FILE)
    writer.write([_record(i, rng) for i in range(5)], 0, 500)
    writer.write([_record(i, rng) for i in range(5, 8)], 500, 800)
    writer.write([_record(i, rng) for i in range(8, 10)], 900, 1000)
    writer.close()
    assert _batch_ranges(tmp_path / COLUMNAR_FILE) == [(8, 0, 800), (2, 900, 1000)]


def test_records_wait_for_the_writer_thread_a_twentieth_of_a_second(tmp_path):
    """Records waiting for the writer are walked by every collection that runs meanwhile, and a
    quarter second's worth made pauses of ~1 ms on a busy worker (sinks/records.py
    FLUSH_INTERVAL_S): the writer thread takes them every 50 ms. One record at a time (a drain
    of one is never paced), added at moments spread over the interval: half are written within
    75 ms (with 0.25 s, about a third would be)."""
    import time

    sink = RecordsSink(tmp_path, "local")
    sink.open()
    took: list[float] = []
    for i in range(40):
        t0 = time.perf_counter()
        sink.add(_streamed(i))
        while sink.written <= i and time.perf_counter() - t0 < 5:
            time.sleep(0.001)  # polling the writer thread's count
        took.append(time.perf_counter() - t0)
        time.sleep(0.007 * (i % 5))  # the next add lands elsewhere in the writer's interval
    sink.close()
    assert sink.written == 40
    assert float(np.median(took)) < 0.075, sorted(took)
