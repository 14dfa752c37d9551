"""Where the suite's files are, for tests in any folder of tests/: a path built
from a test module's own ``__file__`` would change with the folder it sits in."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
"""tests/support/: the shared helpers, the child scripts, the servers, the data."""
TESTS = SUPPORT.parent
ROOT = TESTS.parent
"""The checkout (or the unpacked sdist): README.md, pyproject.toml, .ci/."""
FIXTURES = SUPPORT / "fixtures"
WIRE = FIXTURES / "wire"
"""Recorded provider streams (see SOURCES.md there)."""
LEDGERS = FIXTURES / "ledgers"
"""Ledgers written by older versions (see README.md there)."""
MCP_SERVERS = SUPPORT / "mcp_servers"
DEMO_SERVER = MCP_SERVERS / "demo.py"
"""The demo MCP server, written with the SDK's ``MCPServer``."""
EDGE_SERVERS = MCP_SERVERS / "edge"
"""MCP servers for edge cases: odd schemas, big or deep answers, crashes, silence."""
