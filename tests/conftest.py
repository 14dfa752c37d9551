import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["proxyserver"]  # a real proxy server (proxy.py) for the proxy tests


@pytest.fixture
async def loopback():
    """A real HTTP server on 127.0.0.1 answering with scripted replies."""
    from loopback import Loopback

    server = Loopback()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()
