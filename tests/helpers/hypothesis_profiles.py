"""Hypothesis settings for every property test: import this module before using @given.

Fixed example counts and no deadline (the machines are shared: a slow example is not a bug).
With CI set the examples are derandomized, so a CI run is reproducible and a failure can be
replayed exactly; locally each run explores new examples. HYPOTHESIS_PROFILE=deep runs many
more, for a bug hunt after changing a parser. No example database: every regression a run
found is kept as an explicit @example in the test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from helpers.binaries import IN_CI

_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}

settings.register_profile("ci", max_examples=100, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("dev", max_examples=100, **_COMMON)
settings.register_profile("deep", max_examples=5000, **_COMMON)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev"))
