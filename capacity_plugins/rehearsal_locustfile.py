"""The locustfile `capacity run` starts: the LLM user plus the rehearsal wiring (`--scenario`).

Kept inside the package so `capacity run` works from an installed wheel, not only a checkout.
"""

from capacity_plugins import rehearsal
from capacity_plugins.users import LLMUser

rehearsal.install()


class LLM(LLMUser):
    """The concrete user Locust spawns (LLMUser is abstract)."""
