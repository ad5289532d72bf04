"""`/metrics`: the engine's state under vLLM's names, plus simulated DCGM-exporter GPU readings.

Written by hand (a few histograms and counters) rather than through prometheus_client so the
engine loop pays a list index per observation, not a lock. Every vLLM series carries
`model_name` and `engine="0"`; the GPU series carry `modelName="SIMULATED-GPU"` and
`simulated="true"` so nobody mistakes them for a real card.

GPU model: utilisation is the time-weighted batch occupancy (running / max_num_seqs while the
engine is stepping, 0 while idle) smoothed over ~1 s; SM-active follows it at 0.9×; power is
60 W + 240 W × util; temperature drifts towards 35 °C + 45 °C × util with a 20 s time constant;
framebuffer use is constant at 90 % because vLLM preallocates its KV cache (raw VRAM is no load
signal — use `vllm:kv_cache_usage_perc`). The same engine state is also served under Triton's
names (`triton_metrics`), so a scrape of kind `triton` finds its series on the same endpoint.
"""

from __future__ import annotations

import math
import socket
from bisect import bisect_left
from time import perf_counter
from typing import TYPE_CHECKING

from capacity_plugins.simulator.gpu_model import GPU_UUID, gpu_power_w, gpu_used_mib
from capacity_plugins.simulator.triton_metrics import render_triton

if TYPE_CHECKING:
    from collections.abc import Callable

    from capacity_plugins.simulator.config import SimConfig
    from capacity_plugins.simulator.engine import Sequence

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
NV_FIRST_RESPONSE_BUCKETS_MS = (100, 500, 2000, 5000)  # Triton's defaults
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    __slots__ = ("name", "help", "buckets", "counts", "sum", "count")

    def __init__(self, name: str, help: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help, self.buckets = name, help, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, labels: str, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {self.help}")
        out.append(f"# TYPE {self.name} histogram")
        cumulative = 0
        for bound, n in zip(self.buckets, self.counts, strict=False):
            cumulative += n
            out.append(f'{self.name}_bucket{{{labels},le="{bound}"}} {cumulative}')
        out.append(f'{self.name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{self.name}_count{{{labels}}} {self.count}")
        out.append(f"{self.name}_sum{{{labels}}} {self.sum!r}")


class EngineMetrics:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.running = 0
        self.waiting = 0
        self.kv_used = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.step_lag_s = 0.0  # steps started late beyond the 1 ms the engine makes up
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS)
        self.prefill = Histogram("vllm:request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS)
        self.decode = Histogram("vllm:request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS)
        self.inference = Histogram("vllm:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             ITL_BUCKETS)
        self.req_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                    TOKEN_BUCKETS)
        self.req_generation = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                        TOKEN_BUCKETS)
        # Triton's per-model statistics (nv_inference_*, rendered by triton_metrics): like Triton's
        # InferenceStatsAggregator, a success adds its durations (whole microseconds), a failure
        # only counts under its reason.
        self.nv_success = 0
        self.nv_failure: dict[str, int] = {"REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}
        self.nv_request_us = 0
        self.nv_queue_us = 0
        self.nv_compute_us = 0
        self.nv_first_response = Histogram("nv_inference_first_response_histogram_ms",
                                           "Duration from request to first response in milliseconds",
                                           NV_FIRST_RESPONSE_BUCKETS_MS)
        self.context = 0  # requests that joined the batch (prefilled) in the current step
        # LoRA adapters (simulator/lora.py): loads into a GPU slot, the adapters running and waiting
        self.lora_loads = 0
        self.deferred = 0  # waiting requests held by the max_loras rule (vLLM's reason="deferred")
        self.lora_running: list[str] = []
        self.lora_waiting: list[str] = []
        # GPU simulation state
        self._occ_ewma = 0.0
        self._occ_at = perf_counter()
        self._occ_now = 0.0  # occupancy since _occ_at
        self._temp_c = 35.0
        self._temp_at = perf_counter()
        self.hostname = socket.gethostname()

    # -- engine hooks ---------------------------------------------------------------------------
    def first_token(self, seq: Sequence, now: float) -> None:
        self.ttft.observe(now - seq.arrival)
        self.nv_first_response.observe((now - seq.arrival) * 1000.0)

    def request_finished(self, seq: Sequence, now: float) -> None:
        reason = seq.finish_reason or "abort"
        self.success[reason] = self.success.get(reason, 0) + 1
        if reason != "abort":
            # As vLLM does, the per-phase times of a request are observed together when it
            # finishes (TTFT when its first token comes); a finished request has all its stamps.
            admitted = seq.admitted_at if seq.admitted_at is not None else seq.arrival
            first = seq.first_token_at if seq.first_token_at is not None else now
            self.e2e.observe(now - seq.arrival)
            self.queue.observe(admitted - seq.arrival)
            self.prefill.observe(first - admitted)
            self.inference.observe(now - admitted)
            self.decode.observe(now - first)
            self.req_prompt.observe(seq.prompt_tokens)
            self.req_generation.observe(seq.generated)
            self.nv_success += 1
            self.nv_request_us += round((now - seq.arrival) * 1e6)
            self.nv_queue_us += round((admitted - seq.arrival) * 1e6)
            self.nv_compute_us += round((now - admitted) * 1e6)

    def request_failed(self, reason: str) -> None:
        """A request ended without success: Triton's failure count, by reason."""
        self.nv_failure[reason] += 1

    def mark_busy(self, now: float, running: int) -> None:
        self._advance(now)
        self._occ_now = running / self.config.max_num_seqs

    def mark_idle(self, now: float) -> None:
        self._advance(now)
        self._occ_now = 0.0

    def _advance(self, now: float) -> None:
        dt = now - self._occ_at
        if dt > 0:
            keep = math.exp(-dt / 1.0)
            self._occ_ewma = self._occ_ewma * keep + self._occ_now * (1 - keep)
            self._occ_at = now

    def gpu_util(self) -> float:
        self._advance(perf_counter())
        return min(1.0, max(0.0, self._occ_ewma))

    # -- exposition -----------------------------------------------------------------------------
    def render(self) -> bytes:
        cfg = self.config
        lab = f'engine="0",model_name="{cfg.model}"'
        out: list[str] = []

        def gauge(name: str, help: str, value: float, labels: str = lab) -> None:
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} gauge")
            out.append(f"{name}{{{labels}}} {value!r}")

        def counter(name: str, help: str, values: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} counter")
            for labels, value in values:
                out.append(f"{name}_total{{{labels}}} {float(value)!r}")

        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float(self.running))
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float(self.waiting))
        # vLLM (0.32) splits the queue by why a request waits: `capacity` for a batch slot or KV
        # room, `deferred` for a transient constraint (here: its adapter cannot join the batch).
        out += ["# HELP vllm:num_requests_waiting_by_reason Number of requests waiting by reason.",
                "# TYPE vllm:num_requests_waiting_by_reason gauge",
                f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {float(self.waiting - self.deferred)!r}',
                f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} {float(self.deferred)!r}']
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
              self.kv_used / cfg.kv_cache_tokens)
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(lab, self.preemptions)])
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [(lab, self.prompt_tokens)])
        counter("vllm:generation_tokens", "Number of generation tokens processed.", [(lab, self.generation_tokens)])
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                [(lab, self.prefix_queries)])
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                [(lab, self.prefix_hits)])
        counter("vllm:request_success", "Count of successfully processed requests.",
                [(f'{lab},finished_reason="{k}"', v) for k, v in sorted(self.success.items())])
        counter("simulator_step_lag_seconds", "Time the simulated GPU ran late because the host woke the "
                "engine more than 1 ms after a step was due (0 on an idle machine).", [(lab, self.step_lag_s)])
        if cfg.lora_adapters:
            self._render_lora(out, lab, counter)
        for h in (self.ttft, self.itl, self.queue, self.prefill, self.decode, self.inference, self.e2e,
                  self.req_prompt, self.req_generation):
            h.render(lab, out)
        info = (f'block_size="{cfg.block_size}",enable_prefix_caching="{cfg.prefix_cache}",'
                f'engine="0",gpu_memory_utilization="0.9",model_name="{cfg.model}",'
                f'num_gpu_blocks="{cfg.kv_cache_tokens // cfg.block_size}",max_num_seqs="{cfg.max_num_seqs}"')
        gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1.0, info)
        util = self.gpu_util()
        self._render_gpu(out, util)
        render_triton(self, util, out)
        out.append("")
        return "\n".join(out).encode()

    def _render_lora(self, out: list[str], lab: str, counter: Callable[[str, str, list[tuple[str, float]]], None]) -> None:
        # vLLM's info gauge: the adapters in the batch and in the queue, as label values
        info = (f'max_lora="{self.config.max_loras}",running_lora_adapters="{",".join(sorted(self.lora_running))}",'
                f'waiting_lora_adapters="{",".join(sorted(self.lora_waiting))}"')
        out += ["# HELP vllm:lora_requests_info Running stats on lora requests.", "# TYPE vllm:lora_requests_info gauge",
                f"vllm:lora_requests_info{{{info}}} 1.0"]
        counter("simulator_lora_loads", "LoRA adapters loaded into a GPU slot (each stalled its step by "
                "lora_swap_ms).", [(lab, self.lora_loads)])

    def _render_gpu(self, out: list[str], util: float) -> None:
        cfg = self.config
        now = perf_counter()
        target = 35.0 + 45.0 * util
        self._temp_c += (target - self._temp_c) * (1 - math.exp(-(now - self._temp_at) / 20.0))
        self._temp_at = now
        used_mib = gpu_used_mib(cfg)
        labels = (f'gpu="0",UUID="{GPU_UUID}",pci_bus_id="00000000:00:00.0",'
                  f'device="nvidia0",modelName="SIMULATED-GPU",Hostname="{self.hostname}",simulated="true"')
        for name, help, value in (
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", round(100 * util)),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used_mib),
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", cfg.gpu_memory_mib - used_mib),
            ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", round(self._temp_c)),
            ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", gpu_power_w(util)),
            ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.",
             round(0.9 * util, 6)),
        ):
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} gauge")
            out.append(f"{name}{{{labels}}} {value}")
