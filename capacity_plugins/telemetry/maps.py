"""Known Prometheus metric maps: raw metric names of each exporter → the normalised series of telemetry_series.csv (docs/telemetry.md).

Normalisation happens in two stages:

1. `normalize(kind, samples, default_host)` turns one scrape into a `Snapshot`: gauges already in
   the series' unit, and cumulative histogram (sum, count), counter and counter-ratio totals.
2. `SeriesTracker.rows(snapshot, unix)` turns successive snapshots into telemetry_series rows.
   Histograms become the mean of the observations that completed *during the scrape interval*
   (Δsum/Δcount; no row when nothing completed) plus a `<series>_count` row with Δcount, so
   a step's exact mean is Σ(value·count)/Σcount; counters become per-second rates, ratios
   Δnumerator/Δdenominator (a duration ratio, Triton's queue time per request, also gets its
   `<series>_count` row: Δdenominator). A counter that went backwards (server restart) yields no row and
   becomes the new baseline. Exact per-step histogram figures come from the raw
   `_bucket/_sum/_count` rows kept in telemetry.csv.

Grouping: host = DCGM's `Hostname`/`hostname` label when present (both spellings have shipped),
else the scraped target's host:port. device = the GPU index (`gpu` label) for GPU series, the
model name for server series (summed over vLLM's `engine` data-parallel label, averaged for ratios).

DCGM marks "no value" with values ≥ 0x7ffffffffffffff0 (blank / not found / not supported / not
permissioned); those, and NaN, are dropped. Counter samples are matched with or without `_total`
because prometheus_client's parser appends it to counter samples that lack it (Triton's).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

KINDS = ("dcgm", "gpu-agent", "vllm", "tgi", "sglang", "triton", "simulator")

DCGM_BLANK_MIN = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_BLANK; +1 not found, +2 not supported, +3 not permissioned
MIB = 2**20

UNITS: dict[str, str] = {
    "gpu_util_pct": "%", "gpu_mem_util_pct": "%", "sm_active": "ratio", "gr_engine_active": "ratio",
    "tensor_active": "ratio", "dram_active": "ratio", "vram_used_bytes": "bytes",
    "vram_free_bytes": "bytes", "vram_total_bytes": "bytes", "gpu_temp_c": "C", "gpu_power_w": "W",
    "gpu_power_limit_w": "W", "sm_clock_mhz": "MHz", "clock_event_reasons": "bitmask",
    "server_running": "requests", "server_waiting": "requests", "server_deferred": "requests", "kv_cache_usage": "ratio",
    "server_ttft_s": "s", "server_queue_s": "s", "server_prefill_s": "s", "server_e2e_s": "s",
    "server_itl_s": "s", "server_output_tps": "tokens/s", "server_prompt_tps": "tokens/s",
    "server_preemptions_per_s": "1/s", "prefix_cache_hit_rate": "ratio", "client_cpu_pct": "%", "client_system_cpu_pct": "%",
    "client_rss_bytes": "bytes",
}

RuleType = Literal["gauge", "hist", "rate", "ratio"]


@dataclass(frozen=True)
class Rule:
    """How one raw metric feeds one series. Earlier rules win over later ones for the same series
    and device (so `vllm:kv_cache_usage_perc` beats the deprecated `vllm:gpu_cache_usage_perc`)."""

    metric: str                       # sample name (counters without `_total`; histograms: the family)
    series: str
    type: RuleType = "gauge"
    scale: float = 1.0
    agg: Literal["sum", "mean"] = "sum"
    device_label: str | None = None   # label naming the device; None -> "server"
    match: tuple[tuple[str, str], ...] = ()
    denominators: tuple[str, ...] = ()  # ratio rules: counters summed into the denominator


def _gpu(metric: str, series: str, scale: float = 1.0) -> Rule:
    return Rule(metric, series, scale=scale, agg="mean", device_label="gpu")


DCGM: tuple[Rule, ...] = (
    _gpu("DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct"),
    _gpu("DCGM_FI_DEV_MEM_COPY_UTIL", "gpu_mem_util_pct"),
    _gpu("DCGM_FI_PROF_SM_ACTIVE", "sm_active"),
    _gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gr_engine_active"),
    _gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active"),
    _gpu("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active"),
    _gpu("DCGM_FI_DEV_FB_USED", "vram_used_bytes", MIB),
    _gpu("DCGM_FI_DEV_FB_FREE", "vram_free_bytes", MIB),
    _gpu("DCGM_FI_DEV_GPU_TEMP", "gpu_temp_c"),
    _gpu("DCGM_FI_DEV_POWER_USAGE", "gpu_power_w"),
    _gpu("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
    _gpu("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_reasons"),   # DCGM 3.3+ name of the same field
    _gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_reasons"),
)

GPU_AGENT: tuple[Rule, ...] = DCGM + (
    _gpu("capacity_gpu_vram_total_bytes", "vram_total_bytes"),
    _gpu("capacity_gpu_power_limit_watts", "gpu_power_limit_w"),
)

VLLM: tuple[Rule, ...] = (
    Rule("vllm:num_requests_running", "server_running", device_label="model_name"),
    Rule("vllm:num_requests_waiting", "server_waiting", device_label="model_name"),
    # The part of that queue held back by a transient constraint rather than a lack of batch
    # slots: with LoRA adapters, requests whose adapter cannot join a batch already at --max-loras.
    Rule("vllm:num_requests_waiting_by_reason", "server_deferred", device_label="model_name",
         match=(("reason", "deferred"),)),
    Rule("vllm:kv_cache_usage_perc", "kv_cache_usage", agg="mean", device_label="model_name"),
    Rule("vllm:gpu_cache_usage_perc", "kv_cache_usage", agg="mean", device_label="model_name"),
    Rule("vllm:time_to_first_token_seconds", "server_ttft_s", "hist", device_label="model_name"),
    Rule("vllm:request_queue_time_seconds", "server_queue_s", "hist", device_label="model_name"),
    Rule("vllm:request_prefill_time_seconds", "server_prefill_s", "hist", device_label="model_name"),
    Rule("vllm:e2e_request_latency_seconds", "server_e2e_s", "hist", device_label="model_name"),
    Rule("vllm:inter_token_latency_seconds", "server_itl_s", "hist", device_label="model_name"),
    Rule("vllm:time_per_output_token_seconds", "server_itl_s", "hist", device_label="model_name"),
    Rule("vllm:generation_tokens", "server_output_tps", "rate", device_label="model_name"),
    Rule("vllm:prompt_tokens", "server_prompt_tps", "rate", device_label="model_name"),
    Rule("vllm:num_preemptions", "server_preemptions_per_s", "rate", device_label="model_name"),
    # Share of queried prompt tokens the prefix cache supplied: V1's token counters (their older
    # gpu_ spelling next), else V0's own gauge.
    Rule("vllm:prefix_cache_hits", "prefix_cache_hit_rate", "ratio", device_label="model_name",
         denominators=("vllm:prefix_cache_queries",)),
    Rule("vllm:gpu_prefix_cache_hits", "prefix_cache_hit_rate", "ratio", device_label="model_name",
         denominators=("vllm:gpu_prefix_cache_queries",)),
    Rule("vllm:gpu_prefix_cache_hit_rate", "prefix_cache_hit_rate", agg="mean", device_label="model_name"),
)

TGI: tuple[Rule, ...] = (
    Rule("tgi_batch_current_size", "server_running"),
    Rule("tgi_queue_size", "server_waiting"),
    Rule("tgi_request_queue_duration", "server_queue_s", "hist"),
    # TGI has no TTFT histogram; the prefill batch time is the server-side part of TTFT after queueing.
    Rule("tgi_batch_inference_duration", "server_prefill_s", "hist", match=(("method", "prefill"),)),
    Rule("tgi_request_duration", "server_e2e_s", "hist"),
    Rule("tgi_request_mean_time_per_token_duration", "server_itl_s", "hist"),
)

SGLANG: tuple[Rule, ...] = (
    Rule("sglang:num_running_reqs", "server_running", device_label="model_name"),
    Rule("sglang:num_queue_reqs", "server_waiting", device_label="model_name"),
    Rule("sglang:token_usage", "kv_cache_usage", agg="mean", device_label="model_name"),
    Rule("sglang:time_to_first_token_seconds", "server_ttft_s", "hist", device_label="model_name"),
    Rule("sglang:queue_time_seconds", "server_queue_s", "hist", device_label="model_name"),
    # Newer releases time each stage of a request; `prefill_forward` is its prefill (the whole
    # prompt, or the last chunk's stage under chunked prefill).
    Rule("sglang:per_stage_req_latency_seconds", "server_prefill_s", "hist", device_label="model_name",
         match=(("stage", "prefill_forward"),)),
    Rule("sglang:e2e_request_latency_seconds", "server_e2e_s", "hist", device_label="model_name"),
    Rule("sglang:inter_token_latency_seconds", "server_itl_s", "hist", device_label="model_name"),
    Rule("sglang:time_per_output_token_seconds", "server_itl_s", "hist", device_label="model_name"),
    Rule("sglang:generation_tokens", "server_output_tps", "rate", device_label="model_name"),
    Rule("sglang:prompt_tokens", "server_prompt_tps", "rate", device_label="model_name"),
    Rule("sglang:cache_hit_rate", "prefix_cache_hit_rate", agg="mean", device_label="model_name"),
)

TRITON: tuple[Rule, ...] = (
    Rule("nv_trt_llm_request_metrics", "server_running", device_label="model",
         match=(("request_type", "active"),)),
    Rule("nv_inference_pending_request_count", "server_waiting", device_label="model"),
    Rule("nv_trt_llm_kv_cache_block_metrics", "kv_cache_usage", agg="mean", device_label="model",
         match=(("kv_cache_block_type", "fraction"),)),
    Rule("nv_inference_first_response_histogram_ms", "server_ttft_s", "hist", scale=1e-3, device_label="model"),
    Rule("nv_inference_queue_duration_us", "server_queue_s", "ratio", scale=1e-6, device_label="model",
         denominators=("nv_inference_request_success", "nv_inference_request_failure")),
    Rule("nv_gpu_utilization", "gpu_util_pct", scale=100.0, agg="mean", device_label="gpu_uuid"),
    Rule("nv_gpu_memory_used_bytes", "vram_used_bytes", agg="mean", device_label="gpu_uuid"),
    Rule("nv_gpu_memory_total_bytes", "vram_total_bytes", agg="mean", device_label="gpu_uuid"),
    Rule("nv_gpu_power_usage", "gpu_power_w", agg="mean", device_label="gpu_uuid"),
    Rule("nv_gpu_power_limit", "gpu_power_limit_w", agg="mean", device_label="gpu_uuid"),
)

MAPS: dict[str, tuple[Rule, ...]] = {
    "dcgm": DCGM,
    "gpu-agent": GPU_AGENT,
    "vllm": VLLM,
    "tgi": TGI,
    "sglang": SGLANG,
    "triton": TRITON,
    # The embedded simulator serves vLLM's names and simulated DCGM GPU names on one endpoint.
    "simulator": VLLM + DCGM,
}

# Raw samples worth keeping in telemetry.csv for each kind (process_/python_ noise is left out).
RAW_PREFIXES: dict[str, tuple[str, ...]] = {
    "dcgm": ("DCGM_",),
    "gpu-agent": ("DCGM_", "capacity_gpu_"),
    "vllm": ("vllm:",),
    "tgi": ("tgi_",),
    "sglang": ("sglang:",),
    "triton": ("nv_",),
    "simulator": ("vllm:", "DCGM_", "simulator_", "capacity_"),
}
_NOISE_PREFIXES = ("python_", "process_")


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def canonical(name: str) -> str:
    return name[:-6] if name.endswith("_total") else name


def is_blank(value: float) -> bool:
    return math.isnan(value) or value >= DCGM_BLANK_MIN


def guess_kind(metric_names: Iterable[str]) -> str | None:
    """The exporter kind from the metric names one scrape returned; None when unrecognised."""
    names = list(metric_names)

    def has(prefix: str) -> bool:
        return any(n.startswith(prefix) for n in names)

    if has("capacity_gpu_"):
        return "gpu-agent"
    if has("vllm:"):
        return "simulator" if has("DCGM_FI_") else "vllm"
    if has("DCGM_FI_"):
        return "dcgm"
    if has("sglang:"):
        return "sglang"
    if has("tgi_"):
        return "tgi"
    if has("nv_inference_") or has("nv_gpu_"):
        return "triton"
    return None


def keep_raw(kind: str | None, name: str) -> bool:
    if name.startswith(_NOISE_PREFIXES):
        return False
    prefixes = RAW_PREFIXES.get(kind or "")
    return True if prefixes is None else name.startswith(prefixes)


Key = tuple[str, str, str]  # host, device, series


@dataclass
class Snapshot:
    gauges: dict[Key, float] = field(default_factory=dict)
    hists: dict[Key, tuple[float, float]] = field(default_factory=dict)   # cumulative (sum, count)
    counters: dict[Key, float] = field(default_factory=dict)              # cumulative value
    ratios: dict[Key, tuple[float, float]] = field(default_factory=dict)  # cumulative (num, den)


def host_of(labels: dict[str, str], default_host: str) -> str:
    return labels.get("Hostname") or labels.get("hostname") or default_host


def _matches(rule: Rule, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in rule.match)


def _key(rule: Rule, labels: dict[str, str], default_host: str) -> Key:
    device = labels.get(rule.device_label, "") if rule.device_label else ""
    return host_of(labels, default_host), device or "server", rule.series


def normalize(kind: str, samples: Iterable[Sample], default_host: str) -> Snapshot:
    rules = MAPS[kind]
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        if not is_blank(s.value):
            by_name.setdefault(canonical(s.name), []).append(s)
    snap = Snapshot()
    claimed: set[Key] = set()
    for rule in rules:
        found: dict[Key, list[Any]] = {}
        if rule.type == "gauge" or rule.type == "rate":
            for s in by_name.get(rule.metric, ()):
                if _matches(rule, s.labels):
                    found.setdefault(_key(rule, s.labels, default_host), []).append(s.value * rule.scale)
        elif rule.type == "hist":
            for part in ("sum", "count"):
                for s in by_name.get(f"{rule.metric}_{part}", ()):
                    if _matches(rule, s.labels):
                        acc = found.setdefault(_key(rule, s.labels, default_host), [0.0, 0.0])
                        acc[0 if part == "sum" else 1] += s.value * (rule.scale if part == "sum" else 1.0)
        else:  # ratio
            for s in by_name.get(rule.metric, ()):
                if _matches(rule, s.labels):
                    acc = found.setdefault(_key(rule, s.labels, default_host), [0.0, 0.0])
                    acc[0] += s.value * rule.scale
            for den in rule.denominators:
                for s in by_name.get(den, ()):
                    key = _key(rule, s.labels, default_host)
                    if key in found:
                        found[key][1] += s.value
        for key, acc in found.items():
            if key in claimed:
                continue
            claimed.add(key)
            if rule.type == "gauge":
                snap.gauges[key] = sum(acc) if rule.agg == "sum" else sum(acc) / len(acc)
            elif rule.type == "rate":
                snap.counters[key] = sum(acc)
            elif rule.type == "hist":
                snap.hists[key] = (acc[0], acc[1])
            else:
                snap.ratios[key] = (acc[0], acc[1])
    _derive_vram_total(snap)
    return snap


def _derive_vram_total(snap: Snapshot) -> None:
    # DCGM has no total-memory field; used + free is the framebuffer size (reserved is outside both).
    for (host, device, series), used in list(snap.gauges.items()):
        if series != "vram_used_bytes":
            continue
        total_key = (host, device, "vram_total_bytes")
        free = snap.gauges.get((host, device, "vram_free_bytes"))
        if total_key not in snap.gauges and free is not None:
            snap.gauges[total_key] = used + free


class SeriesTracker:
    """Turns successive Snapshots of one target into telemetry_series rows (see module docstring)."""

    def __init__(self) -> None:
        self._prev: Snapshot | None = None
        self._prev_unix: float | None = None

    def rows(self, snap: Snapshot, unix: float) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []

        def add(key: Key, value: float) -> None:
            host, device, series = key
            unit = "observations" if series.endswith("_s_count") else UNITS.get(series, "")
            rows.append({"unix": unix, "host": host, "device": device, "series": series,
                         "value": value, "unit": unit})

        for key, value in snap.gauges.items():
            add(key, value)
        prev, prev_unix = self._prev, self._prev_unix
        if prev is not None and prev_unix is not None:
            for key, (total, count) in snap.hists.items():
                if key in prev.hists:
                    d_sum, d_count = total - prev.hists[key][0], count - prev.hists[key][1]
                    if d_count > 0 and d_sum >= 0:
                        add(key, d_sum / d_count)
                        # The weight behind that mean, so a step's exact mean is Σ(mean·n)/Σn.
                        add((key[0], key[1], key[2] + "_count"), d_count)
            dt = unix - prev_unix
            for key, value in snap.counters.items():
                if key in prev.counters and dt > 0:
                    delta = value - prev.counters[key]
                    if delta >= 0:
                        add(key, delta / dt)
            for key, (num, den) in snap.ratios.items():
                if key in prev.ratios:
                    d_num, d_den = num - prev.ratios[key][0], den - prev.ratios[key][1]
                    if d_den > 0 and d_num >= 0:
                        add(key, d_num / d_den)
                        if key[2].endswith("_s"):  # a per-request duration (Triton's queue): its weight too
                            add((key[0], key[1], key[2] + "_count"), d_den)
        self._prev, self._prev_unix = snap, unix
        return rows


def provenance(kind: str | None, samples: Iterable[Sample]) -> dict[str, Any]:
    """Server settings, served models and GPU models that one scrape reveals (for meta.json)."""
    info: dict[str, Any] = {}
    models: set[str] = set()
    gpus: dict[str, str] = {}
    drivers: set[str] = set()
    for s in samples:
        labels = s.labels
        if s.name.endswith("_info") and labels and not s.name.startswith(_NOISE_PREFIXES):
            info[s.name] = dict(labels)   # vllm:cache_config_info, tgi_info…: settings as labels
        for label in ("model_name", "served_model_name"):
            if labels.get(label):
                models.add(labels[label])
        if s.name.startswith("nv_inference_") and labels.get("model"):
            models.add(labels["model"])
        if labels.get("modelName"):
            gpus[labels.get("UUID") or labels.get("gpu", "")] = labels["modelName"]
        if labels.get("DCGM_FI_DRIVER_VERSION"):
            drivers.add(labels["DCGM_FI_DRIVER_VERSION"])
    out: dict[str, Any] = {"kind": kind}
    if info:
        out["info"] = info
    if models:
        out["served_models"] = sorted(models)
    if gpus:
        out["gpu_models"] = sorted(set(gpus.values()))
        out["gpus"] = len(gpus)
    if drivers:
        out["driver_versions"] = sorted(drivers)
    return out
