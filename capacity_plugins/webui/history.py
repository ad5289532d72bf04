"""TTFT / E2E / rate over time, for the charts page: finished requests in fixed time buckets.

The cumulative LLMStats percentiles cannot show how latency moved during a run; this keeps one
small sketch per `bucket_s` bucket of request end times (an hour at 2 s by default).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from capacity_plugins.sinks.sketch import LogHistogram

HISTORY_BUCKET_S = 2
HISTORY_KEEP = 1800  # buckets: one hour at 2 s


class _Bucket:
    __slots__ = ("requests", "failures", "output_tokens", "ttft", "e2e")

    def __init__(self) -> None:
        self.requests = 0
        self.failures = 0
        self.output_tokens = 0
        self.ttft = LogHistogram()
        self.e2e = LogHistogram()


class History:
    """Finished requests per `bucket_s` bucket of their end time (successful ones' latencies)."""

    def __init__(self, bucket_s: int = HISTORY_BUCKET_S, keep: int = HISTORY_KEEP) -> None:
        self.bucket_s = int(bucket_s)
        self.keep = int(keep)
        self._buckets: OrderedDict[int, _Bucket] = OrderedDict()

    def add(self, record: Any) -> None:
        e2e = getattr(record, "e2e_ms", None)
        end = record.sent_unix + (e2e or 0.0) / 1000.0
        key = int(end // self.bucket_s) * self.bucket_s
        b = self._buckets.get(key)
        if b is None:
            late = bool(self._buckets) and key < next(reversed(self._buckets))
            b = self._buckets[key] = _Bucket()
            if late:  # a worker's batch arrived after newer records: keep time order
                self._buckets = OrderedDict(sorted(self._buckets.items()))
            while len(self._buckets) > self.keep:
                self._buckets.popitem(last=False)
        b.requests += 1
        if not record.ok:
            b.failures += 1
            return
        if record.ttft_ms is not None:
            b.ttft.add(record.ttft_ms)
        if e2e is not None:
            b.e2e.add(e2e)
        b.output_tokens += int(record.output_tokens or 0)

    def reset(self) -> None:
        self._buckets.clear()

    def points(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """Closed buckets only: the one still filling would show a false drop in rate."""
        now = time.time() if now_unix is None else now_unix
        out = []
        for start, b in self._buckets.items():
            if start + self.bucket_s > now:
                continue
            out.append({
                "start_unix": start,
                "requests": b.requests,
                "failures": b.failures,
                "rps": b.requests / self.bucket_s,
                "output_tokens_per_s": b.output_tokens / self.bucket_s,
                "ttft_p50_ms": b.ttft.quantile(0.5),
                "ttft_p95_ms": b.ttft.quantile(0.95),
                "ttft_p99_ms": b.ttft.quantile(0.99),
                "e2e_p95_ms": b.e2e.quantile(0.95),
            })
        return out
