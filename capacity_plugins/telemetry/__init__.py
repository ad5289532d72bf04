"""Telemetry recorded during a test, aligned to load steps: GPU, inference server, load generator.

- `nvml.NvmlSampler`, `nvml.acquire_host_lock`: local GPUs through NVML (never raises without a GPU).
- `agent.main`: `capacity gpu-agent`, NVML readings at /metrics under dcgm-exporter names.
- `scrape.ScrapeTarget`: one Prometheus endpoint; failures come back as reasons, not exceptions.
- `maps`: known metric maps (dcgm, gpu-agent, vllm, tgi, sglang, triton, simulator) → normalised series.
- `collector.TelemetryCollector`: scrapes targets (+ NVML) in native threads, writes telemetry.csv and
  telemetry_series.csv (docs/results.md), keeps gaps and provenance.
- `promql.query_range`: the same series from an existing Prometheus server.
- `client.ClientSampler`: the load generator's own CPU and memory.

Nothing here imports Locust; loops run in real OS threads so they work inside a gevent process.
"""
