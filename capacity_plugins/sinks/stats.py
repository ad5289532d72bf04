"""Mergeable live distributions of the LLM metrics (TTFT, ITL, TPOT, E2E).

Locust's own `RequestStats` rounds every value to about two significant digits (up to 5 % off) and its worker-side percentiles cannot be merged. Here every metric
goes into a `LogHistogram`: a DDSketch-style sketch with logarithmic buckets, so any quantile is
within a fixed *relative* error of the exact one, and two sketches merge by adding bucket counts
(worker → master through `report_to_master` / `worker_report`, msgpack-safe dicts).

Percentile definition (contracts/percentiles.py, the same everywhere): **nearest rank**. For `n`
values sorted ascending `x[1] <= ... <= x[n]`, the q-quantile is `x[k]` with
`k = max(1, ceil(q * n))`. `LogHistogram.quantile(q)` returns a value within `rel_error`
(default 0.5 %, guaranteed ≤ 1 %) of that `x[k]`, clamped to the exact min / max seen.

Values at or below `min_value` (default 1e-3, i.e. 1 µs when the unit is ms) are below the
resolution that matters here and are counted in a zero bucket; a quantile that falls into it
is reported as 0.0 (absolute error < `min_value`). Negative values (never produced by a
monotonic clock) are treated as 0; NaN is ignored.

Usage on the hot path (one `record()` per finished LLM call, a few µs)::

    stats = LLMStats()
    stats.record("chat", ok=True, error_kind=None, ttft_ms=41.2, itl_ms=[9.8, 10.1],
                 tpot_ms=9.95, e2e_ms=61.3, output_tokens=3, prompt_tokens=120,
                 now_unix=time.time())
    data["llm_stats"] = stats.take_delta()          # worker, in report_to_master
    master_stats.merge_delta(data["llm_stats"])     # master, in worker_report
    master_stats.rows(time.time())                  # JSON rows for the web UI tab
    master_stats.write_csv(results_dir / "llm_stats.csv")

Latency histograms hold **successful requests only**: a 429 answered in 2 ms must not make TTFT
look better. Failures are counted (total and by `error_kind`).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from capacity_plugins.contracts.percentiles import nearest_rank
from capacity_plugins.sinks.sketch import LogHistogram

__all__ = ["METRICS", "LLMStats", "LogHistogram", "nearest_rank"]

# Keys of the per-name histograms; the unit is in the name (docs/metrics.md).
METRICS: tuple[str, ...] = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")

_DELTA_VERSION = 1


class _Entry:
    """Everything kept for one request name."""

    __slots__ = ("hist", "requests", "failures", "errors", "output_tokens", "prompt_tokens",
                 "first_unix", "last_unix", "per_sec")

    def __init__(self, rel_error: float) -> None:
        self.hist = {m: LogHistogram(rel_error) for m in METRICS}
        self.requests = 0
        self.failures = 0
        self.errors: dict[str, int] = {}
        self.output_tokens = 0
        self.prompt_tokens = 0
        self.first_unix: float | None = None
        self.last_unix: float | None = None
        # {unix second: [requests, output_tokens]} of request ends, for recent-window rates.
        self.per_sec: dict[int, list[int]] = {}

    def is_empty(self) -> bool:
        return self.requests == 0

    def merge(self, o: _Entry) -> None:
        for m in METRICS:
            self.hist[m].merge(o.hist[m])
        self.requests += o.requests
        self.failures += o.failures
        for kind, n in o.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.output_tokens += o.output_tokens
        self.prompt_tokens += o.prompt_tokens
        if o.first_unix is not None and (self.first_unix is None or o.first_unix < self.first_unix):
            self.first_unix = o.first_unix
        if o.last_unix is not None and (self.last_unix is None or o.last_unix > self.last_unix):
            self.last_unix = o.last_unix
        for sec, (r, t) in o.per_sec.items():
            slot = self.per_sec.get(sec)
            if slot is None:
                self.per_sec[sec] = [r, t]
            else:
                slot[0] += r
                slot[1] += t

    def prune(self, keep_s: int) -> None:
        if self.per_sec and self.last_unix is not None:
            horizon = int(self.last_unix) - keep_s
            for sec in [s for s in self.per_sec if s < horizon]:
                del self.per_sec[sec]

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "errors": dict(self.errors),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "first_unix": self.first_unix,
            "last_unix": self.last_unix,
            "per_sec": [[s, r, t] for s, (r, t) in sorted(self.per_sec.items())],
            "h": {m: self.hist[m].to_dict() for m in METRICS},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], rel_error: float) -> _Entry:
        e = cls(rel_error)
        for m in METRICS:
            if m in d["h"]:
                e.hist[m] = LogHistogram.from_dict(d["h"][m])
        e.requests = int(d["requests"])
        e.failures = int(d["failures"])
        e.errors = {str(k): int(v) for k, v in d["errors"].items()}
        e.output_tokens = int(d["output_tokens"])
        e.prompt_tokens = int(d["prompt_tokens"])
        e.first_unix = d["first_unix"]
        e.last_unix = d["last_unix"]
        e.per_sec = {int(s): [int(r), int(t)] for s, r, t in d["per_sec"]}
        return e


class LLMStats:
    """Per-request-name LLM metric distributions and counters, mergeable across processes.

    `record()` writes only into a small pending store (`_recent`), so the hot path pays once.
    Views and `take_delta()` first flush it into `_total` (what rows/CSV show) and `_outbox`
    (what the next `take_delta()` ships). On a worker, `take_delta()` ships and clears the
    outbox; on the master, `merge_delta()` adds a worker's delta to `_total`. Not safe across
    OS threads; under gevent (Locust) greenlets never interleave inside these methods.

    Rates (`rps`, `output_tokens_per_s`) count requests by the second they *ended*: over the last
    `window_s` seconds before `now_unix` (shorter when the run is younger), or, without
    `now_unix`, over the whole span from the first request's send time to the last end.
    """

    AGGREGATED = "Aggregated"
    PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))

    def __init__(self, rel_error: float = 0.005, window_s: int = 10) -> None:
        self.rel_error = rel_error
        self.window_s = int(window_s)
        self._total: dict[str, _Entry] = {}
        self._recent: dict[str, _Entry] = {}
        self._outbox: dict[str, _Entry] = {}

    # -- hot path -------------------------------------------------------------------------

    def record(
        self,
        name: str,
        *,
        ok: bool,
        error_kind: str | None,
        ttft_ms: float | None,
        itl_ms: list[float],
        tpot_ms: float | None,
        e2e_ms: float | None,
        output_tokens: int,
        prompt_tokens: int | None,
        now_unix: float,
    ) -> None:
        e = self._recent.get(name)
        if e is None:
            e = self._recent[name] = _Entry(self.rel_error)
        e.requests += 1
        start_unix = now_unix - e2e_ms / 1000.0 if e2e_ms is not None else now_unix
        if e.first_unix is None or start_unix < e.first_unix:
            e.first_unix = start_unix
        if e.last_unix is None or now_unix > e.last_unix:
            e.last_unix = now_unix
        sec = int(now_unix)
        slot = e.per_sec.get(sec)
        if slot is None:
            slot = e.per_sec[sec] = [0, 0]
        slot[0] += 1
        if not ok:
            e.failures += 1
            kind = error_kind or "unknown"
            e.errors[kind] = e.errors.get(kind, 0) + 1
            return
        h = e.hist
        if ttft_ms is not None:
            h["ttft_ms"].add(ttft_ms)
        if itl_ms:
            h["itl_ms"].add_many(itl_ms)
        if tpot_ms is not None:
            h["tpot_ms"].add(tpot_ms)
        if e2e_ms is not None:
            h["e2e_ms"].add(e2e_ms)
        e.output_tokens += output_tokens
        slot[1] += output_tokens
        if prompt_tokens is not None:
            e.prompt_tokens += prompt_tokens

    # -- distribution ---------------------------------------------------------------------

    def take_delta(self) -> dict[str, Any]:
        """What was recorded since the last call (msgpack/JSON-safe), then cleared.

        The delta is also folded into this object's own totals, so a process that both records
        and displays (a local run) still sees everything.
        """
        self._flush()
        delta, self._outbox = self._outbox, {}
        return {
            "v": _DELTA_VERSION,
            "rel_error": self.rel_error,
            "names": {name: e.to_dict() for name, e in delta.items() if not e.is_empty()},
        }

    def merge_delta(self, d: dict[str, Any]) -> None:
        """Add a `take_delta()` result from another process (master side of worker_report)."""
        if not d:
            return
        if d.get("v") != _DELTA_VERSION:
            raise ValueError(f"LLM stats delta version {d.get('v')!r} not understood (expected {_DELTA_VERSION})")
        incoming = {name: _Entry.from_dict(ed, self.rel_error) for name, ed in d["names"].items()}
        self._fold(self._total, incoming)

    def reset(self) -> None:
        """Forget everything (Locust's "reset stats")."""
        self._total.clear()
        self._recent.clear()
        self._outbox.clear()

    def _flush(self) -> None:
        if self._recent:
            recent, self._recent = self._recent, {}
            self._fold(self._total, recent)
            self._fold(self._outbox, recent)

    def _fold(self, into: dict[str, _Entry], src: dict[str, _Entry]) -> None:
        for name, e in src.items():
            tgt = into.get(name)
            if tgt is None:
                tgt = into[name] = _Entry(self.rel_error)
            tgt.merge(e)
            tgt.prune(self.window_s + 5)

    # -- views ----------------------------------------------------------------------------

    def _view(self) -> dict[str, _Entry]:
        self._flush()
        return self._total

    def names(self) -> list[str]:
        return sorted(self._view())

    def histograms(self, name: str) -> dict[str, LogHistogram]:
        """The four histograms of one name (or `Aggregated`), e.g. for a Prometheus exporter.

        These are the live objects (copy them to keep a snapshot); `Aggregated` is a fresh merge.
        """
        view = self._view()
        if name == self.AGGREGATED:
            return self._aggregate(view).hist
        e = view.get(name)
        return e.hist if e is not None else {m: LogHistogram(self.rel_error) for m in METRICS}

    def _aggregate(self, view: dict[str, _Entry]) -> _Entry:
        agg = _Entry(self.rel_error)
        for e in view.values():
            agg.merge(e)
        agg.prune(self.window_s + 5)
        return agg

    def rows(self, now_unix: float | None = None) -> list[dict[str, Any]]:
        """JSON-ready rows, one per name (sorted) and a final `Aggregated` row."""
        view = self._view()
        out = [self._row(name, view[name], now_unix) for name in sorted(view)]
        out.append(self._row(self.AGGREGATED, self._aggregate(view), now_unix))
        return out

    def _rates(self, e: _Entry, now_unix: float | None) -> tuple[float | None, float | None, float | None]:
        if now_unix is None:
            if e.first_unix is None or e.last_unix is None or e.last_unix <= e.first_unix:
                return None, None, None
            span = e.last_unix - e.first_unix
            return e.requests / span, e.output_tokens / span, span
        # The current second is still filling up, so the window ends at its start.
        end = int(now_unix)
        start = end - self.window_s
        if e.first_unix is not None and e.first_unix > start:
            span = end - e.first_unix
        else:
            span = float(self.window_s)
        if span < 1.0 and e.first_unix is not None:
            # Younger than one full second: count everything so far over the time so far.
            span = now_unix - e.first_unix
            start, end = -1, 1 << 62
        if span <= 0:
            return None, None, None
        reqs = toks = 0
        for sec, (r, t) in e.per_sec.items():
            if start <= sec < end:
                reqs += r
                toks += t
        return reqs / span, toks / span, span

    def _row(self, name: str, e: _Entry, now_unix: float | None) -> dict[str, Any]:
        rps, tok_s, span = self._rates(e, now_unix)
        row: dict[str, Any] = {
            "name": name,
            "requests": e.requests,
            "failures": e.failures,
            "error_rate": e.failures / e.requests if e.requests else 0.0,
            "errors_by_kind": dict(sorted(e.errors.items())),
        }
        for metric in METRICS:
            h = e.hist[metric]
            base = metric[: -len("_ms")]
            row[f"{base}_count"] = h.count
            for label, q in self.PERCENTILES:
                row[f"{base}_{label}_ms"] = h.quantile(q)
            row[f"{base}_mean_ms"] = h.mean
            row[f"{base}_max_ms"] = h.max
        row.update(
            output_tokens=e.output_tokens,
            prompt_tokens=e.prompt_tokens,
            rps=rps,
            output_tokens_per_s=tok_s,
            rate_window_s=span,
            first_unix=e.first_unix,
            last_unix=e.last_unix,
        )
        return row

    CSV_COLUMNS: tuple[str, ...] = (
        "name", "metric", "count", "mean_ms", "min_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms",
        "p999_ms", "max_ms", "requests", "failures", "output_tokens", "prompt_tokens",
        "rps_overall", "output_tokens_per_s_overall",
    )

    def write_csv(self, path: str | Path) -> Path:
        """`llm_stats.csv`: one row per name (plus `Aggregated`) and metric; whole-run rates."""
        path = Path(path)
        view = self._view()
        entries = [(name, view[name]) for name in sorted(view)]
        entries.append((self.AGGREGATED, self._aggregate(view)))
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(self.CSV_COLUMNS)
            for name, e in entries:
                rps, tok_s, _ = self._rates(e, None)
                for metric in METRICS:
                    h = e.hist[metric]
                    qs = [h.quantile(q) for q in (0.5, 0.9, 0.95, 0.99, 0.999)]
                    w.writerow([
                        name, metric[: -len("_ms")], h.count, _fmt(h.mean), _fmt(h.min),
                        *(_fmt(v) for v in qs), _fmt(h.max), e.requests, e.failures,
                        e.output_tokens, e.prompt_tokens, _fmt(rps), _fmt(tok_s),
                    ])
        tmp.replace(path)  # readers never see a half-written file
        return path


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"
