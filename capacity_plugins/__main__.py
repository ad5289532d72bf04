import sys

from capacity_plugins.cli import main

sys.exit(main())
