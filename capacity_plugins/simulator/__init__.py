"""The embedded inference simulator: a continuous-batching LLM server on loopback.

Public API (other areas rely on exactly these):
- `capacity_plugins.simulator.config.SimConfig` — every engine / fault knob, with defaults;
  `SimConfig.from_mapping(d, where="target.simulator")`, `.to_argv()`.
- `capacity_plugins.simulator.launch.SimulatorProcess(config=None, host="127.0.0.1", port=0,
  truth_log=None)` — a subprocess; `.url`, `.port`, `.pid`, `.stop()`, context manager.
- `capacity_plugins.simulator.truth.read_truth(path, min_rows=0, timeout_s=5.0)` — truth-log rows.
- `capacity_plugins.simulator.rawclient` — a bare-socket client that stamps each chunk.
- `capacity simulate` (`capacity_plugins.simulator.cli.main`).

Module map: `http` (asyncio HTTP/1.1), `engine` (scheduler loop), `app` (routing, faults, truth),
`protocol` (what a dialect implements: `Dialect`, `Params`, `BadRequest`, `JobView`),
`openai_api` / `tgi_api` / `ollama_api` / `triton_api` (wire formats; they import `protocol`,
never `app`), `metrics` (vLLM + simulated DCGM), `triton_metrics` (the same state under Triton's
names), `gpu_model` (the simulated card's readings),
`tokens` (prompt-token rule, output words), `server` (the event loop), `launch` (subprocess).
Imports nothing from the load side.
"""
