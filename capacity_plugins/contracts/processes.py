"""What `capacity run` tells the Locust process it supervises (environment variables)."""

from __future__ import annotations

from typing import Final

# The read end of a pipe only the supervisor writes to: EOF means the supervisor is gone.
SUPERVISOR_FD_ENV: Final = "CAPACITY_SUPERVISOR_FD"
# The supervisor's pid: only its direct child acts on the EOF (forked workers leave it to their master).
SUPERVISOR_PID_ENV: Final = "CAPACITY_SUPERVISOR_PID"
