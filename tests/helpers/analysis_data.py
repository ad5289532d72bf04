"""Synthetic results folders from known curves, for the analysis tests.

`make_results(dir, levels=..., rps=..., e2e_p50_ms=..., e2e_p99_ms=...)` writes requests.jsonl,
steps.json, meta.json, scenario.yaml and (optionally) telemetry_series.csv with exactly the
documented schema. Per step it writes round(rps × window_s) requests whose E2E latencies follow a
log-normal with the given P50 and P99 (deterministic quantiles, shuffled), so the analysis must
recover the numbers it was given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from scipy.stats import norm

T0 = 1_700_000_000.0


def _lognormal(n: int, p50: float, p99: float, rng: np.random.Generator) -> np.ndarray:
    sigma = math.log(p99 / p50) / norm.ppf(0.99) if p99 > p50 else 0.0
    z = norm.ppf((np.arange(n) + 0.5) / n)
    v = p50 * np.exp(sigma * z)
    rng.shuffle(v)
    return v


def make_results(
    path: Path,
    *,
    levels: list[float],
    rps: list[float],
    e2e_p50_ms: list[float] | float = 500.0,
    e2e_p99_ms: list[float] | float = 600.0,
    kind: str = "concurrency",
    window_s: float = 10.0,
    offered_rps: list[float] | None = None,
    error_rate: list[float] | None = None,
    client_limited: list[bool] | None = None,
    gpu_util: list[float] | None = None,
    kv_cache: list[float] | None = None,
    waiting: list[float] | None = None,
    gpu_temp: list[float] | None = None,
    slo: dict[str, Any] | None = None,
    capacity: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    itl: str = "inline",  # inline | jsonl | none
    itl_gaps: int = 4,
    output_tokens: int = 64,
    ttft_share: float = 0.25,
    warmup_per_step: int = 2,
    seed: int = 0,
    scenario: bool = True,
) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    n_steps = len(levels)

    def per(v: Any) -> list:
        return list(v) if isinstance(v, list | tuple) else [v] * n_steps

    p50s, p99s = per(e2e_p50_ms), per(e2e_p99_ms)
    rng = np.random.default_rng(seed)
    steps = []
    lines: list[bytes] = []
    itl_lines: list[bytes] = []
    telem: list[str] = ["unix,step,host,device,series,value,unit"]
    t = T0
    rid = 0
    for k in range(n_steps):
        start, wend = t, t + 2.0
        end = wend + window_s
        n = max(int(round(rps[k] * window_s)), 0)
        e2e = _lognormal(n, p50s[k], p99s[k], rng) if n else np.empty(0)
        n_err = int(round((error_rate[k] if error_rate else 0.0) * n))
        open_loop = kind in ("rate", "peak")
        for i in range(n + warmup_per_step):
            warm = i >= n
            ok = warm or i >= n_err
            lat = float(e2e[i]) if not warm else p50s[k]
            sent = (start + 0.5 * i / max(warmup_per_step, 1)) if warm else wend + window_s * i / max(n, 1)
            ttft = lat * ttft_share if ok else None
            gaps = [round((lat - lat * ttft_share) / (output_tokens - 1), 4)] * itl_gaps if ok else []
            rec = {
                "request_id": f"r{rid}", "response_id": f"cmpl-{rid}", "prompt_id": f"p{rid % 1500}", "worker": 0,
                "step": k, "warmup": warm, "attempt": 1, "ok": ok, "status": 200 if ok else 500,
                "error_kind": None if ok else "http_5xx", "error": None if ok else "HTTP 500",
                "scheduled_unix": sent if open_loop else None, "sent_unix": sent,
                "ttft_ms": ttft, "first_visible_ms": ttft, "e2e_ms": lat if ok else 30.0,
                "ttft_from_schedule_ms": ttft if open_loop and ok else None,
                "e2e_from_schedule_ms": lat if open_loop and ok else None,
                "tpot_ms": (lat - lat * ttft_share) / (output_tokens - 1) if ok else None,
                "itl_tokens": None, "prompt_tokens": 200, "output_tokens": output_tokens if ok else 0,
                "output_tokens_source": "usage", "client_output_tokens": None, "max_tokens": 128,
                "stream": True, "class": "default",
            }
            if itl == "inline":
                rec["itl_ms"] = gaps
            elif itl == "jsonl":
                itl_lines.append(orjson.dumps({"request_id": rec["request_id"], "itl_ms": gaps}))
            lines.append(orjson.dumps(rec))
            rid += 1
        off = offered_rps[k] if offered_rps else (rps[k] if open_loop else None)
        cl = bool(client_limited[k]) if client_limited else False
        steps.append({
            "index": k, "kind": kind, "level": levels[k], "start_unix": start, "warmup_end_unix": wend,
            "end_unix": end, "target_rps": levels[k] if open_loop else None, "offered_rps": off,
            "sent_rps": off, "achieved_rps": n / window_s, "schedule_lag_p99_ms": 1.0,
            "client_cpu_max_pct": 95.0 if cl else 20.0, "client_limited": cl,
            "client_limited_reason": "client CPU above 90 %" if cl else None,
        })
        for j in range(5):
            ts = wend + window_s * (j + 0.5) / 5
            if gpu_util:
                telem.append(f"{ts},{k},gpu0,0,gpu_util_pct,{gpu_util[k]},pct")
                telem.append(f"{ts},{k},gpu0,0,vram_used_bytes,{70e9},bytes")
                telem.append(f"{ts},{k},gpu0,0,gpu_temp_c,{gpu_temp[k] if gpu_temp else 60},C")
                telem.append(f"{ts},{k},gpu0,0,gpu_power_w,300,W")
            if kv_cache:
                telem.append(f"{ts},{k},srv,,kv_cache_usage,{kv_cache[k]},ratio")
            if waiting:
                telem.append(f"{ts},{k},srv,,server_waiting,{waiting[k]},requests")
                telem.append(f"{ts},{k},srv,,server_running,{levels[k]},requests")
        t = end + 1.0
    (path / "requests.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if lines else b""))
    if itl == "jsonl":
        (path / "itl.jsonl").write_bytes(b"\n".join(itl_lines) + b"\n")
    (path / "steps.json").write_text(json.dumps({"steps": steps}))
    (path / "meta.json").write_text(json.dumps(meta if meta is not None else {
        "versions": {"capacity_plugins": "0.1.0"}, "model": "test-model", "server": "vllm", "gpu_names": ["H100"]}))
    if scenario:
        doc: dict[str, Any] = {"name": "synthetic", "load": {"kind": kind}}
        doc["slo"] = slo if slo is not None else {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}
        if capacity is not None:
            doc["capacity"] = capacity
        (path / "scenario.yaml").write_text(yaml.safe_dump(doc))
    if len(telem) > 1:
        (path / "telemetry_series.csv").write_text("\n".join(telem) + "\n")
    return path
