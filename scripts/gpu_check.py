#!/usr/bin/env python3
"""Prove the NVML sampler on a real NVIDIA GPU: sample for N seconds, print a JSON verdict.

    python scripts/gpu_check.py [--seconds 10] [--interval 1]

Always uses the real `pynvml` module from the nvidia-ml-py distribution (never the tests' fake,
whatever CAPACITY_FAKE_NVML says), and reports which file and version it loaded, because the
deprecated `pynvml` PyPI project can shadow it (both install a module named `pynvml`). Exit 0 when every
GPU answered with utilisation and memory readings, 1 otherwise (no driver, no GPU, or missing
essential fields) — the JSON says which.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    if args.seconds <= 0 or args.interval <= 0:
        print("gpu_check: --seconds and --interval must be > 0", file=sys.stderr)
        return 2
    os.environ.pop("CAPACITY_FAKE_NVML", None)

    from capacity_plugins.telemetry.agent import check
    from capacity_plugins.telemetry.nvml import NvmlSampler

    bindings: dict[str, str | None] = {}
    try:
        import pynvml
    except ImportError as e:
        print(json.dumps({"ok": False, "verdict": f"nvidia-ml-py is not installed: {e}"}, indent=2))
        return 1
    bindings["module_file"] = getattr(pynvml, "__file__", None)
    for dist in ("nvidia-ml-py", "pynvml"):
        try:
            bindings[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            bindings[dist] = None
    sampler = NvmlSampler(interval_s=args.interval, nvml_module=pynvml)
    try:
        report = check(sampler, args.seconds, args.interval)
    finally:
        sampler.close()
    report["bindings"] = bindings
    if bindings.get("pynvml"):
        report.setdefault("warnings", []).append(
            "the deprecated `pynvml` distribution is installed; it can shadow nvidia-ml-py's pynvml.py")
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
