import orjson

from capacity_plugins.contracts.records import RECORD_FIELDS, RequestRecord, Timings

# requests.jsonl fields (docs/results.md), in one place so a drift fails here.
DOCUMENTED_FIELDS = {
    "request_id", "response_id", "prompt_id", "worker", "step", "warmup", "attempt", "ok", "status",
    "error_kind", "error", "scheduled_unix", "sent_unix", "ttft_ms", "first_visible_ms", "e2e_ms",
    "ttft_from_schedule_ms", "e2e_from_schedule_ms", "tpot_ms", "itl_ms", "itl_tokens",
    "prompt_tokens", "output_tokens", "output_tokens_source", "client_output_tokens", "max_tokens",
    "stream", "workload", "tokenizer_output_tokens", "finish_reason", "session_id", "turn",
    "tool_wait_ms", "session_ms", "reasoning_tokens", "reasoning_tokens_source", "visible_output_tokens",
    "tpot_visible_ms", "images", "image_sizes",
}
MS = 1_000_000


def build(t, **kw):
    args = dict(request_id="r", response_id="x", prompt_id="p", worker=0, step=None, warmup=False,
                attempt=1, status=200, error_kind=None, error=None, usage_output_tokens=None,
                continuous_output_tokens=None, prompt_tokens=None, max_tokens=64, stream=True)
    args.update(kw)
    return RequestRecord.build(t, **args)


def stream_timings():
    # sent at 0; tokens at 100, 110, 125, 140 ms (first is reasoning, visible from 110); end 150
    t = Timings(sent_unix=1000.0, sent_ns=0)
    t.first_token_ns = 100 * MS
    t.first_visible_ns = 110 * MS
    t.token_ns = [100 * MS, 110 * MS, 125 * MS, 140 * MS]
    t.chunk_tokens = [None, None, None, None]
    t.end_ns = 150 * MS
    return t


def test_fields_are_exactly_design_md():
    rec = build(stream_timings())
    d = orjson.loads(rec.to_json_bytes())
    assert set(d) == DOCUMENTED_FIELDS == set(RECORD_FIELDS)
    assert rec.to_json_bytes().endswith(b"\n")
    assert RequestRecord.from_dict(d) == rec
    # the line holds the fields in the record's order, as the dict of them does
    assert rec.to_json_bytes() == orjson.dumps(rec.to_dict(), option=orjson.OPT_APPEND_NEWLINE)
    assert list(d) == list(RECORD_FIELDS)


def test_derived_metrics_from_raw_stamps():
    rec = build(stream_timings(), usage_output_tokens=7)
    assert rec.ttft_ms == 100.0 and rec.first_visible_ms == 110.0 and rec.e2e_ms == 150.0
    assert rec.itl_ms == [10.0, 15.0, 15.0]
    # TPOT uses the server's count: (140 - 100) / (7 - 1)
    assert abs(rec.tpot_ms - 40 / 6) < 1e-3
    assert (rec.output_tokens, rec.output_tokens_source, rec.client_output_tokens) == (7, "usage", 4)
    assert rec.ok and rec.error_kind is None


def reasoning_timings():
    # 2 reasoning chunks at 100, 110 ms, then 3 visible at 120, 130, 150 ms
    t = stream_timings()
    t.first_visible_ns = 120 * MS
    t.token_ns = [100 * MS, 110 * MS, 120 * MS, 130 * MS, 150 * MS]
    t.chunk_tokens = [None] * 5
    t.reasoning_events, t.visible_events, t.last_visible_ns = 2, 3, 150 * MS
    return t


def test_reasoning_counted_by_channel_without_a_server_count():
    rec = build(reasoning_timings())
    assert (rec.output_tokens, rec.output_tokens_source) == (5, "chunks")
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source, rec.visible_output_tokens) == (2, "channel", 3)
    assert rec.first_visible_ms == 120.0 and rec.ttft_ms == 100.0
    assert rec.tpot_visible_ms == 15.0  # (150 - 120) / (3 - 1), the thinking left out
    assert rec.tpot_ms == 12.5  # (150 - 100) / (5 - 1): every token


def test_reasoning_from_the_servers_usage_details_wins():
    rec = build(reasoning_timings(), usage_output_tokens=40, usage_reasoning_tokens=30)
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source, rec.visible_output_tokens) == (30, "usage", 10)
    assert abs(rec.tpot_visible_ms - 30 / 9) < 1e-3
    # a server count of output with the thinking counted by channel: visible = output - reasoning
    rec = build(reasoning_timings(), usage_output_tokens=40)
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source, rec.visible_output_tokens) == (2, "channel", 38)


def test_no_reasoning_leaves_the_reasoning_fields_null():
    rec = build(stream_timings(), usage_output_tokens=4)
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source, rec.visible_output_tokens, rec.tpot_visible_ms) == \
        (None, None, None, None)
    # a server that says 0 reasoning tokens said something: kept
    assert build(stream_timings(), usage_output_tokens=4, usage_reasoning_tokens=0).visible_output_tokens == 4


def test_token_source_priority():
    t = stream_timings()
    assert build(t, usage_output_tokens=4, continuous_output_tokens=9).output_tokens_source == "usage"
    r = build(t, continuous_output_tokens=9)
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (9, "continuous_usage", 4)
    r = build(t)
    assert (r.output_tokens, r.output_tokens_source, r.client_output_tokens) == (4, "chunks", None)


def test_itl_tokens_only_when_the_server_says_for_every_chunk():
    t = stream_timings()
    t.chunk_tokens = [2, 1, 3, 1]
    assert build(t).itl_tokens == [1, 3, 1]
    t.chunk_tokens = [2, None, 3, 1]
    assert build(t).itl_tokens is None
    t.chunk_tokens = [None, 1, 3, None]
    assert build(t).itl_tokens is None
    t.chunk_tokens = [2]
    assert build(t).itl_tokens is None  # no gap: nothing said about one


def test_tpot_null_for_single_token_and_failures_keep_timing():
    t = Timings(sent_unix=1.0, sent_ns=0)
    t.first_token_ns = 5 * MS
    t.token_ns = [5 * MS]
    t.chunk_tokens = [None]
    t.end_ns = 6 * MS
    assert build(t).tpot_ms is None
    f = build(Timings(sent_unix=1.0, sent_ns=0, end_ns=3 * MS), status=503, error_kind="http_5xx", error="HTTP 503")
    assert not f.ok and f.ttft_ms is None and f.e2e_ms == 3.0 and f.itl_ms == [] and f.output_tokens == 0


def test_schedule_relative_metrics_add_the_send_lag():
    t = stream_timings()
    t.scheduled_unix = 999.95  # sent 50 ms late
    r = build(t)
    assert abs(r.ttft_from_schedule_ms - 150.0) < 1e-6 and abs(r.e2e_from_schedule_ms - 200.0) < 1e-6


def test_non_stream_has_no_token_timing_and_usage_count():
    t = Timings(sent_unix=1.0, sent_ns=0, end_ns=80 * MS)
    r = build(t, stream=False, usage_output_tokens=12)
    assert r.ttft_ms is None and r.tpot_ms is None and r.output_tokens == 12 and r.client_output_tokens is None
    r = build(t, stream=False)
    assert r.output_tokens is None and r.output_tokens_source is None


def test_workload_field_and_old_class_placeholder():
    rec = build(stream_timings(), workload="chat")
    d = orjson.loads(rec.to_json_bytes())
    assert d["workload"] == "chat" and "class" not in d
    assert build(stream_timings()).workload is None
    # Folders written before workload classes carry `class: "default"`: read as no class.
    old = {k: v for k, v in d.items() if k != "workload"} | {"class": "default"}
    assert RequestRecord.from_dict(old).workload is None


def test_itl_gaps_are_exactly_rounded_ms():
    # The fast integer rounding of the gaps must give the very doubles round(ns / 1e6, 4) gives:
    # ties (…50 ns), negatives, sub-100 ns, and gaps of hours, which a float shortcut would miss.
    import random

    from capacity_plugins.contracts.records import _gaps_ms

    rng = random.Random(14)
    gaps = [0, 1, 49, 50, 51, 99, 100, 150, 250, 12_345_650, 12_345_649, -50, -1, -150, -12_345,
            10**13 + 50, 10**13 + 51, 3 * 10**15 + 7]
    gaps += [rng.randrange(0, 10**9) for _ in range(50_000)]
    gaps += [rng.randrange(0, 10**7) // 100 * 100 + 50 for _ in range(5_000)]  # ties
    gaps += [rng.randrange(-10**6, 0) for _ in range(5_000)]
    stamps = [10**12]
    for g in gaps:
        stamps.append(stamps[-1] + g)
    got = _gaps_ms(stamps)
    want = [round((b - a) / 1e6, 4) for a, b in zip(stamps, stamps[1:], strict=False)]
    assert [x.hex() for x in got] == [x.hex() for x in want]  # hex: -0.0 and 0.0 differ too
    t = Timings(sent_unix=0.0, sent_ns=stamps[0] - 1, first_token_ns=stamps[0], token_ns=stamps,
                chunk_tokens=[None] * len(stamps), end_ns=stamps[-1])
    assert build(t).itl_ms == want
