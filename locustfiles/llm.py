"""Streaming LLM load test. Plain Locust drives the load, or a scenario does.

    locust -f locustfiles/llm.py --headless -u 4 -r 4 -t 30s --host http://127.0.0.1:8000 \
        --dialect openai-chat --model M --corpus prompts.jsonl --max-tokens 64 --results-dir out/

    locust -f locustfiles/llm.py --scenario scenarios/quickstart.yaml     # a whole rehearsal

The user class and the wiring live in the package (the same locustfile `capacity run` uses), so a
checkout and an installed wheel behave the same.
"""

from capacity_plugins.locustfile import LLM  # noqa: F401  (Locust picks up the user class)
