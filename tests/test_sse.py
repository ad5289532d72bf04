from capacity_plugins.dialects.framing import NDJSONDecoder, SSEDecoder


def feed_all(dec, lines):
    out = [d for d in (dec.feed(line) for line in lines) if d is not None]
    tail = dec.flush()
    return out + ([tail] if tail is not None else [])


def test_sse_lf_and_crlf_events():
    lines = [b"data: {\"a\":1}\n", b"\n", b"data: {\"a\":2}\r\n", b"\r\n", b"data: [DONE]\n", b"\n"]
    assert feed_all(SSEDecoder(), lines) == [b'{"a":1}', b'{"a":2}', b"[DONE]"]


def test_sse_comments_fields_and_no_space_after_colon():
    dec = SSEDecoder()
    lines = [b": keep-alive\n", b"\n", b"event: message\n", b"id: 7\n", b"retry: 10\n", b"data:{\"x\":1}\n", b"\n"]
    assert feed_all(dec, lines) == [b'{"x":1}']
    assert dec.event == b"message"


def test_sse_multiline_data_is_joined_with_newline():
    lines = [b"data: line one\n", b"data: line two\n", b"\n"]
    assert feed_all(SSEDecoder(), lines) == [b"line one\nline two"]


def test_sse_stream_without_trailing_blank_line_or_done_is_flushed():
    assert feed_all(SSEDecoder(), [b"data: {\"a\":1}\n", b"\n", b"data: {\"b\":2}"]) == [b'{"a":1}', b'{"b":2}']


def test_sse_blank_lines_alone_emit_nothing():
    assert feed_all(SSEDecoder(), [b"\n", b"\r\n", b"\n"]) == []


def test_ndjson_lines():
    assert feed_all(NDJSONDecoder(), [b'{"a":1}\n', b"\n", b'  {"b":2}\r\n', b'{"c":3}']) == [
        b'{"a":1}',
        b'{"b":2}',
        b'{"c":3}',
    ]
