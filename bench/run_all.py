"""`make bench`: run every bench/bench_*.py in its own process and print what each reports.

Benchmarks report ratios measured in one run (e.g. against a bare-socket reader), never
absolute timing asserts; each script prints its own figures and exits 0 unless it crashed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if not scripts:
        print("no benchmarks found")
        return 1
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        rc = subprocess.call([sys.executable, str(script)] + sys.argv[1:], cwd=HERE.parent)
        if rc != 0:
            failed.append(script.stem)
    if failed:
        print(f"\nbenchmarks that crashed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
