"""`python -m capacity_plugins.simulator …`: what `SimulatorProcess` starts (same flags as `capacity simulate`)."""

import sys

from capacity_plugins.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED, RunError, UserError
from capacity_plugins.simulator.cli import main

try:
    sys.exit(main(sys.argv[1:]))
except UserError as e:
    print(f"capacity simulate: error: {e}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)
except RunError as e:
    print(f"capacity simulate: run failed: {e}", file=sys.stderr)
    sys.exit(EXIT_RUN_FAILED)
except KeyboardInterrupt:
    sys.exit(130)
