"""An embeddings capacity run against a real server: llama.cpp's, in its `--embedding` mode.

    python scripts/check_real_embeddings.py --server-python PY --gguf MODEL.gguf [--out DIR]

Not in `make test`: building llama.cpp (llama-cpp-python[server], from source) takes ~6 minutes
on 2 cores, longer than the suite may grow. PY is a Python with it installed; MODEL.gguf any GGUF
model (scripts/make_tiny_llama.py makes a tiny one offline). The script starts
`python -m llama_cpp.server --embedding true` on a free loopback port, checks that one answer
holds a vector per text, runs `capacity run` of an embeddings sweep against it (dialect
openai-embeddings: `/v1/embeddings`, a batch of texts per request), and checks what a real server
must give: every request answered, no record lost, and an analysis that decides the capacity in
items/s. Prints the plain answer and the per-step items/s; exit 0 when all holds, 1 when not (the
reason on one line).
"""

from __future__ import annotations

import sys
from pathlib import Path

from real_server import (
    Run,
    finish,
    free_port,
    out_folder,
    parser,
    post,
    serve_and_run,
    start,
    write_scenario,
)

BATCH = 8
NAME = "embeddings-llamacpp"


def one_answer(url: str) -> str | None:
    """One request of BATCH texts by hand: the answer must hold one non-empty vector per text (the
    dialect checks an answer is a list of items, not how many). None when it does, else why not."""
    doc = post(url + "/v1/embeddings", {"model": "tiny", "input": [f"{i}: a text to embed" for i in range(BATCH)]})
    data = doc.get("data") or []
    if len(data) != BATCH or not all(isinstance(d.get("embedding"), list) and d["embedding"] for d in data):
        return f"{len(data)} vectors for {BATCH} texts: {str(doc)[:200]}"
    return None


def scenario(url: str, out: Path) -> Path:
    return write_scenario(out, {
        "name": NAME, "output": str(out / "results"),
        "target": {"url": url, "dialect": "openai-embeddings", "model": "tiny"},
        "corpus": {"path": "synthetic:prompt_tokens=64,n=2000,seed=1", "min_distinct": 1000},
        "request": {"stream": False, "batch_size": BATCH, "timeout_s": 60},
        # llama.cpp's server answers one request at a time: the knee is at one user
        "load": {"kind": "concurrency_sweep", "levels": [1, 2, 4], "step_s": 12, "warmup_s": 2,
                 "min_requests": 10},
        "slo": {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 2000},
    })


def main() -> int:
    ap = parser(__doc__, "a Python with llama-cpp-python[server] installed")
    ap.add_argument("--gguf", required=True, help="the GGUF model the server loads")
    args = ap.parse_args()
    out = out_folder(args.out, "capacity-real-embeddings-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = out / "server.log"
    server = start([args.server_python, "-m", "llama_cpp.server", "--model", args.gguf, "--model_alias", "tiny",
                    "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "1",
                    "--embedding", "true", "--interrupt_requests", "False"], log)
    run = serve_and_run(server, url, log, lambda: scenario(url, out), NAME, check=lambda: one_answer(url),
                        what="llama.cpp server")
    if not isinstance(run, Run):
        print(f"check: FAILED: {run}")
        return 1
    summary = run.summary
    print(summary.answer)
    for step in summary.item_rates.steps if summary.item_rates is not None else []:
        ci = "–".join(f"{x:.1f}" for x in step.items_per_s_ci or [] if x is not None)
        print(f"  {step.level:g} users: {step.items_per_s or 0:.1f} [{ci}] items/s, "
              f"input tokens/s {step.input_tokens_per_s}")
    return finish(run.problems(), f"{len(run.records)} requests of {BATCH} texts, all answered; results: {run.folder}")


if __name__ == "__main__":
    sys.exit(main())
