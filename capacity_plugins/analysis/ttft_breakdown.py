"""Where TTFT goes, per step: the server's queue, prefill and TTFT means from its own histograms, and
the client-side remainder (client TTFT mean − server TTFT mean = network + client).

Means, never percentiles: percentiles cannot be subtracted. telemetry_series.csv holds, per scrape
interval, each server histogram's Δsum/Δcount as a mean row and its weight as a `<series>_count`
row (telemetry/maps.py `SeriesTracker`). Over a step's measured window the exact mean is
Σ(mean·count) / Σcount over the intervals between the first scrape inside the window and the last
one inside it — the scrapes at the window's edges, or the nearest inside. A row's interval starts at
its target's previous successful scrape, so once the first in-window scrape of that host and device
is known, every later row covers time inside the window only. A counter that went backwards (a
server restart) left no row for that interval: the mean is over the others. Several hosts or
devices (replicas, engines) are pooled: their sums and counts add up.

Which requests: vLLM (and the simulator) observe queue and prefill time when a request finishes,
TTFT when its first token comes. The client TTFT mean is over the requests whose first token
arrived between the scrapes the server TTFT mean used — the requests that histogram counted — so
the remainder compares the same requests; without a server TTFT it is over the step's measured
requests. The queue share is server queue ÷ server TTFT (the closed form's Q / (Q + T_join)),
or ÷ the client TTFT mean when the server exports no TTFT (`ttft_queue_share_basis`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.summary import StepSummary, TtftBreakdown

# Row key → the normalised series it is the mean of (docs/results.md).
SERVER_PARTS = {"server_queue_mean_ms": "server_queue_s", "server_prefill_mean_ms": "server_prefill_s",
                "server_ttft_mean_ms": "server_ttft_s"}
COLUMNS = (*SERVER_PARTS, "client_ttft_mean_ms", "client_remainder_ms", "ttft_queue_share",
           "ttft_queue_share_basis", "ttft_window_unix")
PART_WORDS = {"server_queue_s": "queue time", "server_prefill_s": "prefill time", "server_ttft_s": "TTFT"}
GPU_KINDS = {"dcgm", "gpu-agent"}


@dataclass(frozen=True)
class _Key:
    scrapes: np.ndarray  # every scrape of this host and device that wrote a row, sorted
    unix: np.ndarray     # the histogram's interval rows, sorted
    total: np.ndarray    # Δsum of each interval (mean · count)
    count: np.ndarray    # Δcount


@dataclass(frozen=True)
class WindowMean:
    mean_s: float
    edges: tuple[float, float]  # the scrapes it runs between (the earliest and latest over hosts)
    count: float


class ServerHistograms:
    """The server histograms of one run's telemetry_series.csv, ready for window means."""

    def __init__(self, telemetry: pd.DataFrame | None) -> None:
        self.keys: dict[str, list[_Key]] = {}
        if telemetry is None or telemetry.empty:
            return
        t = telemetry.loc[:, [c for c in ("unix", "host", "device", "series", "value") if c in telemetry.columns]]
        for col in ("host", "device"):
            t[col] = t[col].astype(object).fillna("").astype(str) if col in t.columns else ""
        t = t[t["unix"].notna()]
        wanted = set(SERVER_PARTS.values())
        hist = t[t["series"].isin(wanted | {s + "_count" for s in wanted})]
        if hist.empty:
            return
        pairs = set(zip(hist["host"], hist["device"], strict=True))
        scrapes = {k: np.unique(g["unix"].to_numpy(float)) for k, g in t.groupby(["host", "device"], sort=False)
                   if k in pairs}
        for series in wanted:
            mean = hist[hist["series"] == series]
            weight = hist[hist["series"] == series + "_count"]
            both = mean.merge(weight, on=["host", "device", "unix"], suffixes=("", "_n"))
            both = both[both["value"].notna() & both["value_n"].notna() & (both["value_n"] > 0)]
            for (host, device), g in both.groupby(["host", "device"], sort=False):
                g = g.sort_values("unix")
                n = g["value_n"].to_numpy(float)
                self.keys.setdefault(series, []).append(
                    _Key(scrapes[(host, device)], g["unix"].to_numpy(float), g["value"].to_numpy(float) * n, n))

    def window_mean(self, series: str, begin: float, end: float) -> WindowMean | None:
        """The mean of the observations between the first and the last scrape inside [begin, end]."""
        total = count = 0.0
        lo, hi = np.inf, -np.inf
        for k in self.keys.get(series, ()):
            i = int(np.searchsorted(k.scrapes, begin, "left"))
            j = int(np.searchsorted(k.scrapes, end, "right")) - 1
            if i >= len(k.scrapes) or j <= i:
                continue
            a, b = float(k.scrapes[i]), float(k.scrapes[j])
            r0, r1 = int(np.searchsorted(k.unix, a, "right")), int(np.searchsorted(k.unix, b, "right"))
            if r1 > r0:
                total += float(k.total[r0:r1].sum())
                count += float(k.count[r0:r1].sum())
                lo, hi = min(lo, a), max(hi, b)
        if count <= 0:
            return None
        return WindowMean(total / count, (lo, hi), count)


class TTFTBreakdown:
    """The breakdown columns of each step's row (`row(step, records)`)."""

    def __init__(self, requests: pd.DataFrame | None, telemetry: pd.DataFrame | None) -> None:
        self.hist = ServerHistograms(telemetry)
        self._requests = requests  # the run's records, when `row` is not given the step's own

    def row(self, step: Any, records: pd.DataFrame | None = None) -> dict[str, Any]:
        """The breakdown fields of the step's row (summary.json `steps[]`, COLUMNS), from the step's
        records (or the run's given to the constructor)."""
        requests = self._requests if records is None else records
        assert requests is not None
        has = requests["ttft_ms"].notna() & (requests["step"] == step.index) & requests["sent_unix"].notna()
        r = requests.loc[has, ["ttft_ms", "sent_unix", "ok", "warmup"]]  # not every column: a copy
        client_ttft = r["ttft_ms"].to_numpy(float)
        first = r["sent_unix"].to_numpy(float) + client_ttft / 1000.0
        begin = step.warmup_end_unix if step.warmup_end_unix is not None else step.start_unix
        means: dict[str, float | None] = dict.fromkeys(SERVER_PARTS)
        ttft: WindowMean | None = None
        if begin is not None and step.end_unix is not None:
            for key, series in SERVER_PARTS.items():
                m = self.hist.window_mean(series, begin, step.end_unix)
                means[key] = None if m is None else m.mean_s * 1000.0
                if key == "server_ttft_mean_ms":
                    ttft = m
        window: list[float] | None = None
        if ttft is not None:  # the requests whose first token came between the same scrapes
            a, b = ttft.edges
            sel = (first > a) & (first <= b)
            window = [a, b]
        else:
            sel = (r["ok"] & ~r["warmup"]).to_numpy(bool)
        client = float(client_ttft[sel].mean()) if sel.any() else None
        server, queue = means["server_ttft_mean_ms"], means["server_queue_mean_ms"]
        basis = ("server_ttft", server) if server is not None and server > 0 else ("client_ttft", client)
        shared = queue is not None and bool(basis[1])
        return {**means, "client_ttft_mean_ms": client,
                "client_remainder_ms": client - server if client is not None and server is not None else None,
                "ttft_queue_share": queue / basis[1] if shared else None,  # type: ignore[operator]
                "ttft_queue_share_basis": basis[0] if shared else None, "ttft_window_unix": window}


def breakdown_notes(series: set[str], meta: Meta) -> TtftBreakdown:
    """Which parts the server exports, said once for the run (summary.json `ttft_breakdown`)."""
    parts = {s: s in series and f"{s}_count" in series for s in SERVER_PARTS.values()}
    kinds = [k for k in meta.server_kinds() if k not in GPU_KINDS]
    who = f"the server ({', '.join(kinds)})" if kinds else "the server"
    notes: list[str] = []
    if not any(parts.values()):
        notes.append("where TTFT goes: no server histograms in telemetry_series.csv (server_queue_s, "
                     "server_prefill_s, server_ttft_s): only the client TTFT mean is known — scrape the "
                     "server's /metrics (docs/telemetry.md)")
    else:
        for name, there in parts.items():
            if there:
                continue
            col = next(k for k, v in SERVER_PARTS.items() if v == name)
            words = f"{who} exports no {PART_WORDS[name]} histogram ({name}): {col} is null in every row"
            if name == "server_ttft_s":
                words += "; the client remainder is unknown and the queue share is of the client TTFT"
            notes.append(words)
    return TtftBreakdown(server_parts=parts, server_kinds=kinds, notes=notes)


def ttft_reasons(rows: list[StepSummary], loaded: StepSummary | None, vc: Any,
                 used: Callable[[str, Any], None] | None = None) -> list[str]:
    """Verdict reasons from the breakdown, in plain words: queueing dominating TTFT at the loaded
    step, and a large measuring-path remainder at any valid step (the worst one). The settings
    that decided them go to `used(key, value)` (the verdict lists them apart)."""
    use = used or (lambda _k, _v: None)
    out: list[str] = []
    share = loaded.ttft_queue_share if loaded is not None else None
    if loaded is not None and share is not None and share >= vc.queue_dominant_share:
        of = "the server's TTFT" if loaded.ttft_queue_share_basis == "server_ttft" else "TTFT"
        # A queue the server holds back for LoRA adapters clears with more adapters per batch, not more slots.
        deferred = loaded.server_deferred is not None and loaded.server_deferred >= vc.deferred_min
        fix = ("let one batch hold more LoRA adapters (vLLM's --max-loras) before adding replicas" if deferred
               else "add replicas or batch slots, not faster GPUs")
        out.append(f"TTFT is {share * 100:.0f} % queue at {_level(loaded)} (the server queue takes "
                   f"{loaded.server_queue_mean_ms:.0f} ms of {of} {_of_ms(loaded):.0f} ms on average): {fix}.")
        use("verdict.queue_dominant_share", vc.queue_dominant_share)
        if deferred:
            use("verdict.deferred_min", vc.deferred_min)
    valid = [(r.client_remainder_ms, r) for r in rows if r.valid and r.client_remainder_ms is not None]
    if valid:
        rem, worst = max(valid, key=lambda p: p[0])
        if rem > vc.client_remainder_max_ms:
            out.append(f"The measurement path adds {rem:.1f} ms to TTFT at {_level(worst)} (client TTFT mean "
                       f"{worst.client_ttft_mean_ms:.1f} ms − the server's {worst.server_ttft_mean_ms:.1f} ms): "
                       "check the network / client.")
            use("verdict.client_remainder_max_ms", vc.client_remainder_max_ms)
    return out


def _level(row: StepSummary) -> str:
    """'16 users' or '4.5 req/s' (analysis/capacity.py's words for a level)."""
    from capacity_plugins.analysis.capacity import level_words

    return level_words(row)


def _of_ms(row: StepSummary) -> float:
    if row.ttft_queue_share_basis == "server_ttft":
        return float(row.server_ttft_mean_ms or 0.0)
    return float(row.client_ttft_mean_ms or 0.0)
