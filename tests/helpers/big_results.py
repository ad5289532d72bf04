"""A long run's results folder, as the product writes it: millions of request records with their
ITL gaps, for the analysis's memory and time (bench/bench_analysis.py) and the test that runs it
inside a memory limit (test_analysis_memory.py).

Records are written one by one as the records sink does (requests.jsonl with `itl_ms` inline,
requests.arrow through the sink's own writer, `sinks/columnar.py`, a batch per 4096 records), with
log-normal TTFT and gaps that grow with the step's level: ~80 µs a record of 64 gaps on 2 cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import orjson

from capacity_plugins.contracts.folders import COLUMNAR_FILE
from capacity_plugins.sinks.columnar import ColumnarWriter

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
GAPS = 64  # ITL gaps per record


def generate(out: Path, n: int, layout: str = "product", gaps: int = GAPS, steps: int = len(LEVELS)) -> None:
    """`n` records over `steps` concurrency steps (LEVELS; more: levels 1, 2, … `steps`) into `out`
    (once: a `.complete` marker), in `layout`:
    "product" (`itl_ms` inline in requests.jsonl, and requests.arrow by the records sink's own
    writer, batch by batch as the sink writes it), "inline" (the JSONL alone), "jsonl" or
    "parquet" (the gaps in an itl.jsonl / itl.parquet side file)."""
    done = out / ".complete"
    if done.exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    levels = LEVELS if steps == len(LEVELS) else list(range(1, steps + 1))
    per_step = n // len(levels)
    t0 = 1_700_000_000.0
    steps = []
    pq_ids: list[str] = []
    pq_lists: list[np.ndarray] = []
    columnar = ColumnarWriter(out / COLUMNAR_FILE) if layout == "product" else None
    batch: list[dict] = []
    written = 0  # where the records of `batch` start in requests.jsonl
    with (out / "requests.jsonl").open("wb") as f, ((out / "itl.jsonl").open("wb") if layout == "jsonl" else open(os.devnull, "wb")) as fi:
        rid = 0
        for k, lvl in enumerate(levels):
            window = 600.0
            start, wend, end = t0, t0 + 5, t0 + 5 + window
            ttft = rng.lognormal(np.log(80 * (1 + k / 2)), 0.4, per_step)
            itl = np.round(rng.lognormal(np.log(12 + k), 0.3, (per_step, gaps)), 3)
            for i in range(per_step):
                row = itl[i].tolist()
                e2e = float(ttft[i]) + sum(row)
                rec = {
                    "request_id": f"r{rid}", "response_id": f"cmpl-{rid}", "prompt_id": f"p{rid % 5000}", "worker": 0,
                    "step": k, "warmup": False, "attempt": 1, "ok": True, "status": 200, "error_kind": None,
                    "error": None, "scheduled_unix": None, "sent_unix": wend + window * i / per_step,
                    "ttft_ms": round(float(ttft[i]), 3), "first_visible_ms": round(float(ttft[i]), 3),
                    "e2e_ms": round(e2e, 3), "ttft_from_schedule_ms": None, "e2e_from_schedule_ms": None,
                    "tpot_ms": round((e2e - float(ttft[i])) / gaps, 3), "itl_tokens": None, "prompt_tokens": 300,
                    "output_tokens": gaps + 1, "output_tokens_source": "usage", "client_output_tokens": None,
                    "max_tokens": 128, "stream": True, "workload": None,
                }
                if layout == "jsonl":
                    fi.write(orjson.dumps({"request_id": rec["request_id"], "itl_ms": row}) + b"\n")
                elif layout == "parquet":
                    pq_ids.append(rec["request_id"])
                    pq_lists.append(itl[i])
                else:
                    rec["itl_ms"] = row
                f.write(orjson.dumps(rec) + b"\n")
                rid += 1
                if columnar is not None:  # as the sink does: a batch per flush
                    batch.append(rec)
                    if len(batch) == 4096:
                        f.flush()
                        columnar.write(batch, written, f.tell())
                        written, batch = f.tell(), []
            steps.append({"index": k, "kind": "concurrency", "level": lvl, "start_unix": start, "warmup_end_unix": wend,
                          "end_unix": end, "target_rps": None, "offered_rps": None, "sent_rps": None,
                          "achieved_rps": per_step / window, "schedule_lag_p99_ms": 1.0, "client_cpu_max_pct": 30.0,
                          "client_limited": False, "client_limited_reason": None})
            t0 = end + 2
        if columnar is not None:
            f.flush()
            columnar.write(batch, written, f.tell())
            columnar.close()
    if layout == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        values = pa.array(np.concatenate(pq_lists))
        offsets = pa.array(np.arange(len(pq_lists) + 1, dtype=np.int32) * gaps)
        pq.write_table(pa.table({"request_id": pq_ids, "itl_ms": pa.ListArray.from_arrays(offsets, values)}),
                       out / "itl.parquet")
    (out / "steps.json").write_text(json.dumps({"steps": steps}))
    (out / "meta.json").write_text(json.dumps({"model": "bench", "versions": {}}))
    done.touch()
