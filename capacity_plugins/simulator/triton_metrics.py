"""The engine's state under Triton's metric names (Triton core + TensorRT-LLM backend + GPU).

Served on the same `/metrics` as the vLLM and DCGM names, so a scrape configured with
`kind: triton` finds what `capacity_plugins.telemetry.maps` reads for Triton:
- `nv_inference_request_success`, `nv_inference_request_failure{reason}` (REJECTED: a simulated
  429; CANCELED: the client went away; BACKEND: a simulated 5xx, cut stream or in-stream error),
  `nv_inference_count`; counters without `_total`, as Triton writes them;
- `nv_inference_request_duration_us`, `nv_inference_queue_duration_us`,
  `nv_inference_compute_infer_duration_us`: cumulative microseconds over successful requests only
  (as Triton's statistics do), so `queue_duration_us / request_success` is the mean queue time;
- `nv_inference_pending_request_count` (requests waiting for a slot);
- `nv_inference_first_response_histogram_ms` (arrival → first token, Triton's default buckets);
- `nv_trt_llm_request_metrics{request_type=active|scheduled|context|waiting|max}` and
  `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max|used|free|tokens_per|fraction}`;
- `nv_gpu_utilization` (0–1), `nv_gpu_memory_total_bytes` / `_used_bytes`, `nv_gpu_power_usage`,
  `nv_gpu_power_limit`: the same simulated card as the DCGM series, labelled `simulated="true"`.
Every request the engine serves counts, whichever API it came through; requests refused with a
4xx are not counted (Triton refuses those in its HTTP front end, before the model sees them).
Labels are `model` (the served model name) and `version="1"`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capacity_plugins.simulator.gpu_model import GPU_UUID, MIB, POWER_LIMIT_W, gpu_power_w, gpu_used_mib

if TYPE_CHECKING:
    from capacity_plugins.simulator.metrics import EngineMetrics


def render_triton(m: EngineMetrics, util: float, out: list[str]) -> None:
    cfg = m.config
    lab = f'model="{cfg.model}",version="1"'

    def family(name: str, kind: str, help: str, samples: list[tuple[str, float | int]]) -> None:
        out.append(f"# HELP {name} {help}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{{{labels}}} {value!r}")

    family("nv_inference_request_success", "counter",
           "Number of successful inference requests, all batch sizes", [(lab, m.nv_success)])
    family("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes",
           [(f'model="{cfg.model}",reason="{reason}",version="1"', n) for reason, n in sorted(m.nv_failure.items())])
    family("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)",
           [(lab, m.nv_success)])
    family("nv_inference_request_duration_us", "counter",
           "Cumulative inference request duration in microseconds (includes cached requests)",
           [(lab, m.nv_request_us)])
    family("nv_inference_queue_duration_us", "counter",
           "Cumulative inference queuing duration in microseconds (includes cached requests)",
           [(lab, m.nv_queue_us)])
    family("nv_inference_compute_infer_duration_us", "counter",
           "Cumulative compute inference duration in microseconds (does not include cached requests)",
           [(lab, m.nv_compute_us)])
    family("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting "
           "execution per-model.", [(lab, m.waiting)])
    m.nv_first_response.render(lab, out)
    family("nv_trt_llm_request_metrics", "gauge", "TRT LLM request metrics",
           [(f'model="{cfg.model}",request_type="{kind}",version="1"', value) for kind, value in (
               ("active", m.running), ("context", m.context), ("max", cfg.max_num_seqs),
               ("scheduled", m.running), ("waiting", m.waiting))])
    blocks = cfg.kv_cache_tokens // cfg.block_size
    fraction = m.kv_used / cfg.kv_cache_tokens
    used = round(fraction * blocks)
    family("nv_trt_llm_kv_cache_block_metrics", "gauge", "TRT LLM KV cache block metrics",
           [(f'kv_cache_block_type="{kind}",model="{cfg.model}",version="1"', value) for kind, value in (
               ("fraction", fraction), ("free", blocks - used), ("max", blocks), ("tokens_per", cfg.block_size),
               ("used", used))])
    gpu = f'gpu_uuid="{GPU_UUID}",simulated="true"'
    family("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)", [(gpu, round(util, 6))])
    family("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes", [(gpu, cfg.gpu_memory_mib * MIB)])
    family("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes", [(gpu, gpu_used_mib(cfg) * MIB)])
    family("nv_gpu_power_usage", "gauge", "GPU power usage in watts", [(gpu, gpu_power_w(util))])
    family("nv_gpu_power_limit", "gauge", "GPU power management limit in watts", [(gpu, POWER_LIMIT_W)])
