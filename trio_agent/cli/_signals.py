"""How a long-running command (``serve``, ``worker``) stops: the first SIGTERM or
SIGINT drains it, a second cancels what is still running."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import trio

__all__ = ["drain_on_signals"]


async def drain_on_signals(
    name: str, draining: Callable[[], bool], drain: Callable[[], None], cancel: trio.CancelScope
) -> None:
    """Call ``drain()`` at the first SIGTERM or SIGINT; at one more, once
    ``draining()`` says so, cancel ``cancel`` (the turns under way). Said on stderr
    as ``trio-agent NAME: ...``. Cancellation: the signal handlers are put back."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            if draining():
                print(f"trio-agent {name}: cancelling the turns under way", file=sys.stderr)
                cancel.cancel()
                return
            print(f"trio-agent {name}: draining (again to cancel)", file=sys.stderr, flush=True)
            drain()
