"""``python -m trio_agent``: the ``trio-agent`` command line."""

import sys

from .cli import main

sys.exit(main())
