"""Streaming LLM load test: Locust's -u/-r/-t drive the load, the plugin measures.

    locust -f locustfiles/llm.py --headless -u 4 -r 4 -t 30s --host http://127.0.0.1:8000 \
        --dialect openai-chat --model M --corpus prompts.jsonl --max-tokens 64 --results-dir out/
"""

from capacity_plugins import plugin
from capacity_plugins.users import LLMUser

plugin.install()


class LLM(LLMUser):
    """The concrete user Locust spawns (LLMUser is abstract)."""
