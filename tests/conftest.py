import signal
import sys
from pathlib import Path

import pytest
from helpers import schedule
from helpers.xdist_threads import keep_worker_on_os_threads

# Locust monkey-patches the stdlib on import; importing requests/urllib3 before it crashes (gevent
# must patch ssl before they import it): it comes before any other import of the tests'. Just
# before it, an xdist worker's thread primitives are kept unpatched (helpers/xdist_threads.py).
keep_worker_on_os_threads()
import locust  # noqa: E402, F401 - for its patching, before every other import of the tests'

# The tests stop Locust with SIGINT, as a person's Ctrl-C. A shell without job control starts a
# background job (`pytest … &` in a script) with SIGINT ignored, every child inherits that, and
# a Locust that starts with SIGINT ignored keeps ignoring it (as Python does): each such test would
# hang to its timeout. Give the children the default disposition, whatever started the tests.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# One way to share a fixture: it lives in a module under tests/fixtures/, listed here. Test modules
# name fixtures as arguments and never import them; plain helpers are imported from tests/helpers/.
# (No option here may be named --host: Locust's pytest plugin registers it.)
pytest_plugins = [
    "fixtures.servers",
    "fixtures.simulator",
    "fixtures.locust",
    "fixtures.faults",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # whole modules, the longest first: scripts/run_tests.py's workers take them in this order
    schedule.longest_modules_first(items)
