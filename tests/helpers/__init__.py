"""Plain functions and classes the tests share (no fixtures: those live in tests/fixtures/).

- paths: where the repository, the tests and their data are
- ports: free_port, wait_port
- waiting: wait_until (poll with one monotonic clock)
- processes: the CLI and Locust as `sys.executable -m ...`, their environment, running them
- results: reading a results folder (requests.jsonl, steps.json, meta.json, llm_stats.csv)
- scenarios: writing scenario and corpus files, the plugin's Locust options
- users: an LLMUser in this process (its own Environment and Events)
- web: tiny urllib GET/POST helpers
- prometheus: parsing an exposition text into samples
- simulator: reading the simulator's /metrics; LOADED, a config whose numbers move with load
- binaries: require_binary and IN_CI
- servers: the scripted fake LLM server and the canned /metrics server, as subprocesses
- fake_llm, canned_metrics: those servers themselves (stdlib only; `python -m helpers.fake_llm`)
- analysis_data: synthetic results folders from known curves
- tokenizer: the tests' tiny tokenizer.json and the simulator's text to count with it
- fake_nvml, deploy_local, dockerfile_steps, hypothesis_profiles: stand-ins for what the machine lacks
"""
