"""Analysis end to end on 1 000 000 synthetic request records (64 ITL gaps each): time and peak RSS.

Goal (issue 14, goal 5): <= 5 s on a 2-core machine for 1 M records, and <= 2 GB for 10 M (a long
soak at high rate; the ITL gaps, 64 per record, are held per step by value, so what grows with the
records is only their ~110 bytes of per-request columns), for the folder as the product writes
it: requests.jsonl with `itl_ms` inline, and requests.arrow written by the records sink's own
writer (sinks/columnar.py). Then the same folder as a run killed before the copy's last batch
leaves it (the copy's batches, then the JSONL's lines after them). For comparison the same
folder without requests.arrow (an older run, or a master without pyarrow: the JSON is parsed),
and the ITL side-file layouts the analysis also reads (`itl.jsonl`, `itl.parquet`). The folders are generated once and cached under /tmp.
Each analysis runs in a fresh process (`capacity analyze`, reports included) so its peak RSS is
its own. A last line prices the intervals alone: nearest-rank
P50/P95/P99 *with* their order-statistic intervals against the plain percentiles, on one step's
worth of ITL gaps. Prints figures; asserts nothing.

    python bench/bench_analysis.py [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from capacity_plugins.analysis.records import _batches  # noqa: E402 - after sys.path names this checkout
from capacity_plugins.contracts.folders import COLUMNAR_FILE  # noqa: E402 - after sys.path names this checkout
from capacity_plugins.contracts.records import columnar_schema  # noqa: E402 - after sys.path names this checkout
from capacity_plugins.sinks.columnar import ColumnarWriter  # noqa: E402 - after sys.path names this checkout

GOAL_S = 5.0
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
GAPS = 64


def generate(out: Path, n: int, layout: str) -> None:
    done = out / ".complete"
    if done.exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    per_step = n // len(LEVELS)
    t0 = 1_700_000_000.0
    steps = []
    pq_ids: list[str] = []
    pq_lists: list[np.ndarray] = []
    columnar = ColumnarWriter(out / COLUMNAR_FILE) if layout == "product" else None
    batch: list[dict] = []
    written = 0  # where the records of `batch` start in requests.jsonl
    with (out / "requests.jsonl").open("wb") as f, ((out / "itl.jsonl").open("wb") if layout == "jsonl" else open(os.devnull, "wb")) as fi:
        rid = 0
        for k, lvl in enumerate(LEVELS):
            window = 600.0
            start, wend, end = t0, t0 + 5, t0 + 5 + window
            ttft = rng.lognormal(np.log(80 * (1 + k / 2)), 0.4, per_step)
            itl = np.round(rng.lognormal(np.log(12 + k), 0.3, (per_step, GAPS)), 3)
            for i in range(per_step):
                gaps = itl[i].tolist()
                e2e = float(ttft[i]) + sum(gaps)
                rec = {
                    "request_id": f"r{rid}", "response_id": f"cmpl-{rid}", "prompt_id": f"p{rid % 5000}", "worker": 0,
                    "step": k, "warmup": False, "attempt": 1, "ok": True, "status": 200, "error_kind": None,
                    "error": None, "scheduled_unix": None, "sent_unix": wend + window * i / per_step,
                    "ttft_ms": round(float(ttft[i]), 3), "first_visible_ms": round(float(ttft[i]), 3),
                    "e2e_ms": round(e2e, 3), "ttft_from_schedule_ms": None, "e2e_from_schedule_ms": None,
                    "tpot_ms": round((e2e - float(ttft[i])) / GAPS, 3), "itl_tokens": None, "prompt_tokens": 300,
                    "output_tokens": GAPS + 1, "output_tokens_source": "usage", "client_output_tokens": None,
                    "max_tokens": 128, "stream": True, "workload": None,
                }
                if layout == "jsonl":
                    fi.write(orjson.dumps({"request_id": rec["request_id"], "itl_ms": gaps}) + b"\n")
                elif layout == "parquet":
                    pq_ids.append(rec["request_id"])
                    pq_lists.append(itl[i])
                else:
                    rec["itl_ms"] = gaps
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
        offsets = pa.array(np.arange(len(pq_lists) + 1, dtype=np.int32) * GAPS)
        pq.write_table(pa.table({"request_id": pq_ids, "itl_ms": pa.ListArray.from_arrays(offsets, values)}),
                       out / "itl.parquet")
    (out / "steps.json").write_text(json.dumps({"steps": steps}))
    (out / "meta.json").write_text(json.dumps({"model": "bench", "versions": {}}))
    done.touch()


def killed(product: Path, out: Path) -> None:
    """The product's folder as a run killed before its last batch of requests.arrow leaves it:
    requests.jsonl whole (hard links), the copy without that batch (the analysis reads the
    batches that match, then parses only the JSONL's lines after them)."""
    import pyarrow as pa
    import pyarrow.ipc

    done = out / ".complete"
    if done.exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in product.iterdir():
        if f.name not in (COLUMNAR_FILE, ".complete") and f.is_file():
            os.link(f, out / f.name)
    with pa.memory_map(str(product / COLUMNAR_FILE)) as source, \
            pyarrow.ipc.new_stream(str(out / COLUMNAR_FILE), columnar_schema()) as writer:
        for batch, meta in list(_batches(pa, source))[:-1]:  # memory-mapped: no copy of the bodies
            writer.write_batch(batch, custom_metadata=meta)
    done.touch()


def _warm(folder: Path) -> None:
    """Read the folder once: an analysis right after a run finds its files in the page cache, and a
    folder generated before a bigger one was written may have been evicted (a disk read, not the
    analysis, would be timed)."""
    for f in folder.iterdir():
        with f.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def run_once(folder: Path) -> tuple[float, float, int]:
    """Wall time and the analysing process's own peak RSS (a fresh interpreter per run).

    The peak is VmHWM, not ru_maxrss: Linux carries a process's ru_maxrss across fork and exec, so
    a child of this (big, after generating) process would report the parent's size."""
    _warm(folder)
    code = (
        "import sys, time; t = time.perf_counter(); from capacity_plugins.cli import main; "
        f"rc = main(['analyze', {str(folder)!r}, '--quiet', '--peak-qps', '100']); "
        "hwm = next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')); "
        "print('BENCH', time.perf_counter() - t, hwm, rc, file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("BENCH")), None)
    if line is None:
        print(r.stderr[-2000:])
        return float("nan"), float("nan"), r.returncode
    _, wall, rss_kb, rc = line.split()
    return float(wall), int(rss_kb) / 1024, int(rc)


def interval_cost(n: int = 8_000_000, repeats: int = 3) -> tuple[float, float]:
    """Seconds for plain nearest-rank P50/P95/P99 and for the same with their intervals (best of repeats)."""
    from capacity_plugins.analysis.intervals import quantiles_ci
    from capacity_plugins.contracts.percentiles import NUMPY_METHOD

    v = np.random.default_rng(2).lognormal(2.5, 0.3, n).astype(np.float32)
    plain, with_ci = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        np.percentile(v, [50, 95, 99], method=NUMPY_METHOD)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        quantiles_ci(v, [0.5, 0.95, 0.99], 0.95, n_eff=n // 64)
        with_ci.append(time.perf_counter() - t)
    return min(plain), min(with_ci)


def big_run(n: int) -> None:
    """Goal 5's second half: a long soak's worth of records within 2 GB, whatever its length."""
    folder = Path(f"/tmp/capacity_bench_analysis_v3_{n}_product")
    need = n * 1400  # JSONL + Arrow bytes per 64-gap record, with room
    if not (folder / ".complete").exists() and shutil.disk_usage("/tmp").free < need:
        print(f"{n:,} records: skipped, /tmp has less than {need / 1e9:.0f} GB free for the folder")
        return
    t = time.perf_counter()
    generate(folder, n, "product")
    gen = time.perf_counter() - t
    wall, rss, rc = run_once(folder)
    print(f"{n:,} records as the product writes: analyse {wall:.1f} s, peak RSS {rss:,.0f} MB "
          f"(goal 2048 MB, ratio {rss / 2048:.2f}), rc {rc}" + (f"  [generated in {gen:.0f} s]" if gen > 1 else ""),
          flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--big-records", type=int, default=10_000_000,
                    help="the long-soak memory case (0: skip); its folder takes ~13 GB of /tmp and ~7 min to write once")
    args = ap.parse_args()
    try:
        import pyarrow  # noqa: F401 - only whether it is installed

        reader = "pyarrow"
    except ImportError:
        reader = "orjson (pyarrow not installed)"
    print(f"records: {args.records:,} × {GAPS} ITL gaps; JSON reader: {reader}; cores: {os.cpu_count()}")
    layouts = {"product": "as the product writes", "killed": "killed before its last batch",
               "inline": "requests.jsonl alone", "jsonl": "itl.jsonl side file", "parquet": "itl.parquet side file"}
    if reader != "pyarrow":
        for layout in ("parquet", "product", "killed"):
            layouts.pop(layout)
    for layout, label in layouts.items():
        folder = Path(f"/tmp/capacity_bench_analysis_v3_{args.records}_{layout}")
        t = time.perf_counter()
        if layout == "killed":
            killed(Path(f"/tmp/capacity_bench_analysis_v3_{args.records}_product"), folder)
        else:
            generate(folder, args.records, layout)
        gen = time.perf_counter() - t
        size = sum(f.stat().st_size for f in folder.glob("*.jsonl")) / 1e6
        arrow = folder / COLUMNAR_FILE
        extra = f" + {arrow.stat().st_size / 1e6:,.0f} MB of {COLUMNAR_FILE}" if arrow.exists() else ""
        # the goal's layout three times (this VM's runs vary by ±20 %): the median, and the range
        walls, rss, rc = [], 0.0, 0
        for _ in range(3 if layout == "product" else 1):
            w, r, rc = run_once(folder)
            walls.append(w)
            rss = max(rss, r)
        wall = statistics.median(walls)
        spread = f" [{min(walls):.1f}–{max(walls):.1f} s in {len(walls)} runs]" if len(walls) > 1 else ""
        print(f"{label:22s}: {size:,.0f} MB of JSONL{extra}, analyse {wall:.1f} s{spread} (goal {GOAL_S:g} s, ratio "
              f"{wall / GOAL_S:.2f}), peak RSS {rss:,.0f} MB (goal 2048 MB, ratio {rss / 2048:.2f}), rc {rc}"
              + (f"  [generated in {gen:.0f} s]" if gen > 1 else ""), flush=True)
    if args.big_records and reader == "pyarrow":
        big_run(args.big_records)
    plain, with_ci = interval_cost()
    print(f"intervals on 8 M ITL gaps: P50/P95/P99 {plain * 1000:.0f} ms, with their order-statistic intervals "
          f"{with_ci * 1000:.0f} ms (ratio {with_ci / plain:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
