"""``python -m trio_agent``: the ``trio-agent`` command line."""

import sys

from ._cli import main

sys.exit(main())
