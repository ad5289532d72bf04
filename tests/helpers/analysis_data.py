"""Synthetic results folders from known curves, for the analysis tests.

`make_results(dir, levels=..., rps=..., e2e_p50_ms=..., e2e_p99_ms=...)` writes requests.jsonl,
steps.json, meta.json, scenario.yaml and (optionally) telemetry_series.csv with exactly the
documented schema. Per step it writes round(rps × window_s) requests whose E2E latencies follow a
log-normal with the given P50 and P99 (deterministic quantiles, shuffled), so the analysis must
recover the numbers it was given. Its sends are evenly spaced: a throughput without noise.

`with_typed_copy(dir)` adds requests.arrow as the records sink writes it (a batch per 50 records,
drains left out make a gap: the JSONL's lines from there are parsed).

`make_queue_results(dir, levels=..., slots=..., service_ms=...)` is the noisy one: closed-loop
users against a server with `slots` parallel slots and random service times, simulated request by
request, so throughput and latency carry the noise a real server's do.
"""

from __future__ import annotations

import heapq
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
    window_s: float = 60.0,
    offered_rps: list[float] | None = None,
    error_rate: list[float] | None = None,
    client_limited: list[bool] | None = None,
    gpu_util: list[float] | None = None,
    kv_cache: list[float] | None = None,
    waiting: list[float] | None = None,
    deferred: list[float] | None = None,
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
    step_extra: list[dict[str, Any]] | None = None,
    load: dict[str, Any] | None = None,
    scenario_extra: dict[str, Any] | None = None,
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
                "stream": True, "workload": None,
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
            **(step_extra[k] if step_extra else {}),
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
            if deferred:
                telem.append(f"{ts},{k},srv,,server_deferred,{deferred[k]},requests")
        t = end + 1.0
    (path / "requests.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if lines else b""))
    if itl == "jsonl":
        (path / "itl.jsonl").write_bytes(b"\n".join(itl_lines) + b"\n")
    _write_rest(path, steps, meta, kind, slo, capacity, scenario, load, scenario_extra, telem)
    return path


DEFAULT_META = {"versions": {"capacity_plugins": "0.1.0"}, "model": "test-model", "server": "vllm", "gpu_names": ["H100"]}


def _write_rest(path: Path, steps: list[dict], meta: dict | None, kind: str, slo: dict | None, capacity: dict | None,
                scenario: bool, load: dict | None, scenario_extra: dict | None, telem: list[str]) -> None:
    (path / "steps.json").write_text(json.dumps({"steps": steps}))
    (path / "meta.json").write_text(json.dumps(meta if meta is not None else DEFAULT_META))
    if scenario:
        doc: dict[str, Any] = {"name": "synthetic", "load": {"kind": kind, **(load or {})}}
        doc["slo"] = slo if slo is not None else {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000.0}
        if capacity is not None:
            doc["capacity"] = capacity
        doc.update(scenario_extra or {})
        (path / "scenario.yaml").write_text(yaml.safe_dump(doc))
    if len(telem) > 1:
        (path / "telemetry_series.csv").write_text("\n".join(telem) + "\n")


def make_queue_results(
    path: Path,
    *,
    levels: list[int],
    slots: int = 1,
    service_ms: float = 68.0,
    service_cv: float = 0.5,
    window_s: float = 50.0,
    warmup_s: float = 5.0,
    seed: int = 0,
    slo: dict[str, Any] | None = None,
    capacity: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    output_tokens: int = 32,
) -> Path:
    """Closed-loop `levels[k]` users against a FIFO server with `slots` slots, service times log-normal
    with mean `service_ms` and coefficient of variation `service_cv`; one step per level."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log(1 + service_cv ** 2))
    mu = math.log(service_ms / 1000.0) - sigma ** 2 / 2
    lines: list[bytes] = []
    steps = []
    t0, rid = T0, 0
    for k, users in enumerate(levels):
        wend, end = t0 + warmup_s, t0 + warmup_s + window_s
        free = [t0] * slots  # when each slot is next free
        ready = [t0] * users  # when each user sends next
        heapq.heapify(free)
        heapq.heapify(ready)
        measured = 0
        while True:
            sent = heapq.heappop(ready)
            if sent >= end:
                break  # the drain: nothing is sent after the window
            start = max(sent, heapq.heappop(free))
            service = float(rng.lognormal(mu, sigma))
            done = start + service
            heapq.heappush(free, done)
            heapq.heappush(ready, done)
            e2e, ttft = (done - sent) * 1000, (start - sent + 0.1 * service) * 1000
            measured += sent >= wend
            lines.append(orjson.dumps({
                "request_id": f"q{rid}", "response_id": None, "prompt_id": f"p{rid % 1500}", "worker": 0, "step": k,
                "warmup": sent < wend, "attempt": 1, "ok": True, "status": 200, "error_kind": None, "error": None,
                "scheduled_unix": None, "sent_unix": sent, "ttft_ms": ttft, "first_visible_ms": ttft, "e2e_ms": e2e,
                "ttft_from_schedule_ms": None, "e2e_from_schedule_ms": None,
                "tpot_ms": (e2e - ttft) / (output_tokens - 1), "itl_ms": [], "itl_tokens": None, "prompt_tokens": 200,
                "output_tokens": output_tokens, "output_tokens_source": "usage", "client_output_tokens": None,
                "max_tokens": 64, "stream": True, "workload": None}))
            rid += 1
        steps.append({"index": k, "kind": "concurrency", "level": users, "start_unix": t0, "warmup_end_unix": wend,
                      "end_unix": end, "drain_end_unix": max(free), "achieved_rps": measured / window_s,
                      "client_cpu_max_pct": 20.0, "client_limited": False})
        t0 = max(free) + 1.0
    (path / "requests.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if lines else b""))
    _write_rest(path, steps, meta, "concurrency", slo if slo is not None else {"ttft_p95_ms": None, "tpot_p95_ms": None,
                "e2e_p95_ms": None}, capacity, True, None, None, [])
    return path


def make_repeat_set(path: Path, n: int, make: Any) -> Path:
    """A repeat set as the runner writes it: repeats.json and `make(folder, i)` for repeat-1 … repeat-n."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    names = [f"repeat-{i + 1}" for i in range(n)]
    for i, name in enumerate(names):
        make(path / name, i)
    (path / "repeats.json").write_text(json.dumps({"repeats": names}))
    return path


def with_workloads(path: Path, classes: dict[str, dict[str, Any]], workloads: list[dict[str, Any]]) -> Path:
    """Turn a `make_results` folder into a run with workload classes.

    Records of each step are dealt to the classes in turn, `weight` (an integer) records at a time;
    a class's `ttft_ms` / `e2e_ms` (one value per step, optional) replace its records' latencies, so
    its percentiles are exactly those values. `workloads` becomes scenario.yaml's `workloads:`.
    """
    pattern = [name for name, c in classes.items() for _ in range(int(c.get("weight", 1)))]
    recs = [orjson.loads(line) for line in (path / "requests.jsonl").read_bytes().splitlines() if line.strip()]
    seen: dict[int, int] = {}
    for r in recs:
        k = r["step"]
        name = pattern[seen.get(k, 0) % len(pattern)]
        seen[k] = seen.get(k, 0) + 1
        r["workload"] = name
        c = classes[name]
        if not r["ok"]:
            continue
        if "e2e_ms" in c:
            r["e2e_ms"] = float(c["e2e_ms"][k])
        if "ttft_ms" in c:
            r["ttft_ms"] = r["first_visible_ms"] = float(c["ttft_ms"][k])
        if r.get("scheduled_unix") is not None:
            r["ttft_from_schedule_ms"], r["e2e_from_schedule_ms"] = r["ttft_ms"], r["e2e_ms"]
    (path / "requests.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in recs) + b"\n")
    doc = yaml.safe_load((path / "scenario.yaml").read_text())
    doc["workloads"] = workloads
    (path / "scenario.yaml").write_text(yaml.safe_dump(doc))
    return path


def with_typed_copy(folder: Path, skip: frozenset[int] | set[int] = frozenset()) -> Path:
    """requests.arrow for a synthetic folder's requests.jsonl, as the sink writes it (50 records a
    drain), less the drains numbered in `skip` (a gap: the batch before it ends there)."""
    from capacity_plugins.contracts.folders import COLUMNAR_FILE, RECORDS_FILE
    from capacity_plugins.sinks.columnar import ColumnarWriter

    writer = ColumnarWriter(folder / COLUMNAR_FILE)
    start = 0
    lines = (folder / RECORDS_FILE).read_bytes().splitlines(keepends=True)
    for k, i in enumerate(range(0, len(lines), 50)):
        chunk = lines[i:i + 50]
        end = start + sum(len(ln) for ln in chunk)
        if k not in skip:
            writer.write([orjson.loads(ln) for ln in chunk], start, end)
        start = end
    writer.close()
    return folder


def mixed_records(folder: Path, seed: int = 0) -> Path:
    """Rewrite a synthetic folder's requests.jsonl with what real runs add to the clean steps:
    a third of the failures cancelled, records of consecutive steps interleaved (a swarm's
    batches arrive late: the last 40 of each step after the first 40 of the next), and 25
    records with no step (sent between steps) at the end."""
    rng = np.random.default_rng(seed)
    recs = [orjson.loads(ln) for ln in (folder / "requests.jsonl").read_bytes().splitlines()]
    failed = [r for r in recs if not r["ok"]]
    for r in failed[::3]:
        r["error_kind"] = "cancelled"
    by: dict[int, list[dict]] = {}
    for r in recs:
        by.setdefault(r["step"], []).append(r)
    keys = sorted(by)
    out: list[dict] = []
    late: list[dict] = []
    for k in keys:
        mine = by[k]
        out += mine[:40] + late + mine[40:-40]
        late = mine[-40:]
    out += late
    for i in range(25):
        extra = dict(out[int(rng.integers(len(out)))], request_id=f"x{i}", step=None, warmup=False)
        out.append(extra)
    (folder / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in out))
    return folder
