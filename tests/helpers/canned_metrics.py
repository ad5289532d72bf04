"""A real HTTP server on loopback serving canned exposition text (stdlib only: it runs as a script).

The texts follow the formats the servers really emit (as scraped from vLLM, TGI, SGLang, Triton and
dcgm-exporter): vLLM with two data-parallel engines and the `engine` label, DCGM exporter with
`Hostname` (and the newer `hostname`) and a NOT_SUPPORTED sentinel, TGI, SGLang, Triton with
counters lacking `_total`. Counters and histograms advance by a fixed amount on every request to a
path, so a scraper's per-interval deltas have known exact values:

- vLLM TTFT mean 0.25 s, queue 0.05 s, prefill 0.1 s; 40 generated tokens per scrape per engine
- TGI queue 0.1 s, prefill batch 0.05 s; SGLang TTFT 0.3 s; Triton queue 2000 µs = 0.002 s

Run (from tests/): python -m helpers.canned_metrics [PORT] — port 0 (the default) binds a free one; it
prints its URL on its first line once it listens. Tests start it as a subprocess (the `canned_url`
fixture) so the server does not share the test's gevent hub.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SGLANG_MODEL = "Qwen/Qwen2.5-7B-Instruct"
GPU_MODEL = "NVIDIA H100 80GB HBM3"


def _hist(name: str, labels: str, k: int, per_obs: float, bounds: tuple[float, ...]) -> str:
    sep = "," if labels else ""
    lines = [f"# HELP {name} Histogram of {name}.", f"# TYPE {name} histogram"]
    for b in bounds:
        lines.append(f'{name}_bucket{{{labels}{sep}le="{b}"}} {float(k if per_obs <= b else 0)}')
    lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {float(k)}')
    lines.append(f"{name}_count{{{labels}}} {float(k)}" if labels else f"{name}_count {float(k)}")
    lines.append(f"{name}_sum{{{labels}}} {per_obs * k}" if labels else f"{name}_sum {per_obs * k}")
    return "\n".join(lines)


VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
VLLM_LAT_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)


def vllm_text(k: int) -> str:
    parts = ["# HELP python_gc_objects_collected_total Objects collected during gc",
             "# TYPE python_gc_objects_collected_total counter",
             'python_gc_objects_collected_total{generation="0"} 1234.0']
    running, waiting, kv = {"0": 12.0, "1": 8.0}, {"0": 3.0, "1": 2.0}, {"0": 0.5, "1": 0.7}
    for metric, values, help_ in (("vllm:num_requests_running", running, "Number of requests in model execution batches."),
                                  ("vllm:num_requests_waiting", waiting, "Number of requests waiting to be processed."),
                                  ("vllm:kv_cache_usage_perc", kv, "KV-cache usage. 1 means 100 percent usage.")):
        parts += [f"# HELP {metric} {help_}", f"# TYPE {metric} gauge"]
        parts += [f'{metric}{{engine="{e}",model_name="{VLLM_MODEL}"}} {v}' for e, v in values.items()]
    # vLLM 0.32 splits the queue by reason; engine 0's 3 waiting: 1 for capacity, 2 deferred (LoRA budget)
    parts += ["# HELP vllm:num_requests_waiting_by_reason Number of requests waiting by reason.",
              "# TYPE vllm:num_requests_waiting_by_reason gauge"]
    parts += [f'vllm:num_requests_waiting_by_reason{{engine="{e}",model_name="{VLLM_MODEL}",reason="{r}"}} {v}'
              for e, by in (("0", {"capacity": 1.0, "deferred": 2.0}), ("1", {"capacity": 2.0, "deferred": 0.0}))
              for r, v in by.items()]
    parts += ["# HELP vllm:generation_tokens_total Number of generation tokens processed.",
              "# TYPE vllm:generation_tokens_total counter"]
    parts += [f'vllm:generation_tokens_total{{engine="{e}",model_name="{VLLM_MODEL}"}} {40.0 * k}' for e in "01"]
    # Prefix cache: engine 0 finds 300 of 1000 queried tokens cached per scrape, engine 1 100 of 1000.
    for metric, per_engine in (("vllm:prefix_cache_queries", (1000.0, 1000.0)), ("vllm:prefix_cache_hits", (300.0, 100.0))):
        parts += [f"# HELP {metric}_total Prefix cache tokens.", f"# TYPE {metric}_total counter"]
        parts += [f'{metric}_total{{engine="{e}",model_name="{VLLM_MODEL}"}} {v * k}' for e, v in zip("01", per_engine, strict=True)]
    for e in "01":
        labels = f'engine="{e}",model_name="{VLLM_MODEL}"'
        parts.append(_hist("vllm:time_to_first_token_seconds", labels, k, 0.25, VLLM_TTFT_BUCKETS))
        parts.append(_hist("vllm:request_queue_time_seconds", labels, k, 0.05, VLLM_LAT_BUCKETS))
        parts.append(_hist("vllm:request_prefill_time_seconds", labels, k, 0.1, VLLM_LAT_BUCKETS))
    parts += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
              "# TYPE vllm:cache_config_info gauge",
              'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
              'gpu_memory_utilization="0.9",num_gpu_blocks="27404",num_cpu_blocks="2048",'
              'swap_space_bytes="4294967296"} 1.0']
    return "\n".join(parts) + "\n"


def vllm_old_text(k: int) -> str:
    """A pre-0.9 vLLM: only the deprecated gpu_cache_usage_perc gauge."""
    return ("# TYPE vllm:gpu_cache_usage_perc gauge\n"
            f'vllm:gpu_cache_usage_perc{{model_name="{VLLM_MODEL}"}} 0.33\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{VLLM_MODEL}"}} 4.0\n'
            "# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n"
            f'vllm:gpu_prefix_cache_hit_rate{{model_name="{VLLM_MODEL}"}} 0.4\n')


def dcgm_text(k: int, host_label: str = "Hostname") -> str:
    fields = [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", (1980, 1755)),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", (64, 71)),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
         (9223372036854775794, 9223372036854775794)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", (512.25, 498.0)),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", (87, 91)),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", (40, 45)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", (20000, 18000)),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", (61440, 63440)),
        ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
         (0.62, 9223372036854775794)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
         (1000000 + 500 * k, 2000000 + 500 * k)),
    ]
    out = []
    for name, type_, help_, values in fields:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {type_}"]
        for gpu, value in enumerate(values):
            out.append(f'{name}{{gpu="{gpu}",UUID="GPU-a11ce000-0000-0000-0000-00000000000{gpu}",'
                       f'pci_bus_id="00000000:0{gpu + 7}:00.0",device="nvidia{gpu}",modelName="{GPU_MODEL}",'
                       f'{host_label}="gpu-node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} {value}')
    return "\n".join(out) + "\n"


def tgi_text(k: int) -> str:
    bounds = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
    out = ["# TYPE tgi_queue_size gauge", "tgi_queue_size 4",
           "# TYPE tgi_batch_current_size gauge", "tgi_batch_current_size 16",
           "# TYPE tgi_request_count counter", f"tgi_request_count {10 * k}",
           _hist("tgi_request_queue_duration", "", k, 0.1, bounds),
           "# TYPE tgi_batch_inference_duration histogram"]
    for method, per_obs, n in (("prefill", 0.05, k), ("decode", 0.02, 10 * k)):
        text = _hist("tgi_batch_inference_duration", f'method="{method}"', n, per_obs, bounds)
        out += [line for line in text.splitlines() if not line.startswith("#")]
    return "\n".join(out) + "\n"


def sglang_text(k: int) -> str:
    labels = f'model_name="{SGLANG_MODEL}"'
    return "\n".join([
        "# TYPE sglang:num_running_reqs gauge", f"sglang:num_running_reqs{{{labels}}} 5.0",
        "# TYPE sglang:num_queue_reqs gauge", f"sglang:num_queue_reqs{{{labels}}} 1.0",
        "# TYPE sglang:token_usage gauge", f"sglang:token_usage{{{labels}}} 0.42",
        "# TYPE sglang:cache_hit_rate gauge", f"sglang:cache_hit_rate{{{labels}}} 0.55",
        _hist("sglang:time_to_first_token_seconds", labels, k, 0.3, (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0)),
    ]) + "\n"


def triton_text(k: int) -> str:
    m = 'model="ensemble",version="1"'
    uuid = 'gpu_uuid="GPU-a11ce000-0000-0000-0000-000000000000"'
    return "\n".join([
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
        "# TYPE nv_inference_request_success counter", f"nv_inference_request_success{{{m}}} {10 * k}",
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes",
        "# TYPE nv_inference_request_failure counter", f"nv_inference_request_failure{{{m}}} 0",
        "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds",
        "# TYPE nv_inference_queue_duration_us counter", f"nv_inference_queue_duration_us{{{m}}} {2000 * 10 * k}",
        "# HELP nv_inference_pending_request_count Instantaneous number of pending requests",
        "# TYPE nv_inference_pending_request_count gauge", f"nv_inference_pending_request_count{{{m}}} 7",
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
        "# TYPE nv_gpu_utilization gauge", f"nv_gpu_utilization{{{uuid}}} 0.73",
        "# TYPE nv_gpu_memory_used_bytes gauge", f"nv_gpu_memory_used_bytes{{{uuid}}} 70000000000",
        "# TYPE nv_gpu_memory_total_bytes gauge", f"nv_gpu_memory_total_bytes{{{uuid}}} 85899345920",
        "# TYPE nv_gpu_power_usage gauge", f"nv_gpu_power_usage{{{uuid}}} 350.5",
    ]) + "\n"


PAGES = {
    "/vllm/metrics": vllm_text,
    "/vllm-old/metrics": vllm_old_text,
    "/dcgm/metrics": dcgm_text,
    "/dcgm-new/metrics": lambda k: dcgm_text(k, host_label="hostname"),
    "/tgi/metrics": tgi_text,
    "/sglang/metrics": sglang_text,
    "/triton/metrics": triton_text,
    "/sim/metrics": lambda k: vllm_text(k) + dcgm_text(k),
    "/custom/metrics": lambda k: "# TYPE myapp_queue_depth gauge\nmyapp_queue_depth 3\n",
}


class _Handler(BaseHTTPRequestHandler):
    hits: dict[str, int] = defaultdict(int)

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        path = self.path
        if path.startswith("/api/v1/query_range?"):
            self._query_range(path)
        elif path == "/auth/metrics":
            # user "scraper", password "s3cr:t" (Basic auth)
            if self.headers.get("Authorization") == "Basic c2NyYXBlcjpzM2NyOnQ=":
                self._send(200, tgi_text(1))
            else:
                self._send(401, "unauthorised\n")
        elif path == "/slow/metrics":
            time.sleep(3.0)
            self._send(200, vllm_text(1))
        elif path == "/garbage/metrics":
            self._send(200, "<html><body>Welcome to nginx!</body></html>\n", "text/html")
        elif path == "/truncated/metrics":
            self._send(200, 'vllm:num_requests_running{model_name="x" 1\n')
        elif path == "/error/metrics":
            self._send(500, "internal error\n")
        elif path in PAGES:
            self.hits[path] += 1
            self._send(200, PAGES[path](self.hits[path]))
        else:
            self._send(404, "not found\n")

    def _query_range(self, path: str) -> None:
        """A Prometheus HTTP API stand-in: echoes the asked range's ends as sample times."""
        q = parse_qs(urlsplit(path).query)
        expr, start, end = q["query"][0], float(q["start"][0]), float(q["end"][0])
        if "(" in expr and ")" not in expr:
            body: dict[str, object] = {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unclosed left parenthesis"}
            self._send(400, json.dumps(body), "application/json")
            return
        result = []
        if expr == "DCGM_FI_DEV_GPU_UTIL":
            for gpu, value in (("0", "87"), ("1", "NaN")):
                result.append({"metric": {"__name__": expr, "gpu": gpu, "Hostname": "gpu-node-1"},
                               "values": [[start, value], [end, value]]})
        elif expr.startswith("sum by (instance, model_name)"):
            result.append({"metric": {"instance": "10.0.0.5:8000", "model_name": VLLM_MODEL},
                           "values": [[start, "3"], [end, "5"]]})
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        self._send(200, json.dumps(body), "application/json")

    def _send(self, status: int, body: str, ctype: str = "text/plain; version=0.0.4; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


READY_PREFIX = "ready on "


def serve(port: int = 0) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    print(f"{READY_PREFIX}http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
