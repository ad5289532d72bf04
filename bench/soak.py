"""`make soak`: the soak scenario against the embedded simulator, watched from outside.

Runs `capacity run` with scenarios/soak.yaml's load pointed at the embedded simulator for
SOAK_S seconds (default 3600; `make soak SOAK_S=600` for ten minutes) and prints, every
SOAK_EVERY_S seconds, the RSS of every process in the run (capacity run, Locust, the simulator)
and the records written so far — so a leak shows as a slope, and a lost record as a gap between
what was sent and what was written. Not part of CI: it takes as long as you ask.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _scenario(folder: Path, seconds: float) -> Path:
    doc = yaml.safe_load((ROOT / "scenarios" / "soak.yaml").read_text())
    doc["target"] = {"url": "embedded", "simulator": {"max_num_seqs": 16}}
    doc["load"].update(step_s=seconds, warmup_s=min(60.0, seconds / 10), min_requests=1)
    doc["request"]["max_tokens"] = 64
    doc["output"] = str(folder)
    path = folder / "soak.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)


def main() -> int:
    seconds = float(os.environ.get("SOAK_S", "3600"))
    every = float(os.environ.get("SOAK_EVERY_S", "60"))
    folder = Path(tempfile.mkdtemp(prefix="capacity-soak-"))
    scenario = _scenario(folder, seconds)
    proc = subprocess.Popen([sys.executable, "-m", "capacity_plugins", "run", str(scenario), "--no-analyze"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    print(f"soak: {seconds:g} s at {yaml.safe_load(scenario.read_text())['load']['levels'][0]} rps into {folder}",
          flush=True)
    print(f"{'t_s':>7} {'records':>9} {'rps':>6} " + " ".join(f"{n:>14}" for n in ("run_rss_MiB", "locust_rss_MiB",
                                                                              "sim_rss_MiB")), flush=True)
    last_n, last_t = 0, start
    while proc.poll() is None:
        time.sleep(every)
        try:
            parent = psutil.Process(proc.pid)
            kids = parent.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        locust = [k for k in kids if "locust" in " ".join(k.cmdline())]
        sim = [k for k in kids if "simulator" in " ".join(k.cmdline())]
        rss = [parent.memory_info().rss, sum(k.memory_info().rss for k in locust), sum(k.memory_info().rss for k in sim)]
        runs = sorted(folder.glob("soak-*"))
        n = _lines(runs[-1] / "requests.jsonl") if runs else 0
        now = time.monotonic()
        print(f"{now - start:7.0f} {n:9d} {(n - last_n) / (now - last_t):6.2f} "
              + " ".join(f"{r / 2**20:14.1f}" for r in rss), flush=True)
        last_n, last_t = n, now
    out = proc.communicate()[0]
    runs = sorted(folder.glob("soak-*"))
    if runs:
        meta = json.loads((runs[-1] / "meta.json").read_text())
        print(f"records written {_lines(runs[-1] / 'requests.jsonl')}; meta records {meta.get('records')}; "
              f"complete {meta.get('complete')}", flush=True)
    print(out[-1500:])
    return proc.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
