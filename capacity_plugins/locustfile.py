"""The locustfile `capacity run` starts (and `locustfiles/llm.py` re-exports): the LLM user plus
the plugin, with `--scenario` for a whole rehearsal.

Kept inside the package so `capacity run` works from an installed wheel, not only a checkout.
"""

from capacity_plugins.client.users import LLMUser
from capacity_plugins.plugin import install

install()


class LLM(LLMUser):
    """The concrete user Locust spawns (LLMUser is abstract)."""
