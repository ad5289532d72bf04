# Locust monkey-patches the stdlib on import; importing requests/urllib3 before it crashes
# (gevent must patch ssl before they import it). This line must stay first.
import locust  # noqa: F401, I001

import sys
from pathlib import Path

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
]
