"""Start the demo MCP server the first time; afterwards (marker file present) start
a server that never answers initialize (tests/support/mcp_servers/silent.py): a restart
that hangs, as a server whose backend is down might."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = os.environ["MARKER"]
if os.path.exists(MARKER):
    with open(MARKER, "a") as f:
        f.write("restart attempt\n")
    os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(HERE), "silent.py")])
open(MARKER, "w").close()
os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(HERE), "demo.py")])
