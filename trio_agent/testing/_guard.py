"""``block_network()``: the real providers refuse to connect while a test runs."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import final

from ..model import ModelRequestError
from ..providers.http._connection import Origin, add_connect_guard, remove_connect_guard

__all__ = ["NetworkBlockedError", "block_network"]


@final
class NetworkBlockedError(ModelRequestError):
    """A real provider tried to open a connection under ``block_network()``.

    A ``ModelRequestError``: never retried, so the run or turn fails at once
    with ``MODEL_ERROR`` and this message as its detail. ``origin`` is where
    the connection would have gone (``https://api.openai.com:443``), ``test``
    the test that was running, when known.
    """

    def __init__(self, message: str, *, origin: str, test: str | None) -> None:
        super().__init__(message)
        self.origin = origin
        self.test = test


@final
class _Guard:
    """One active ``block_network()``: its test label (None: ask pytest at the connect)."""

    __slots__ = ("test",)

    def __init__(self, test: str | None) -> None:
        self.test = test


# The guards now active, innermost last: the connect guard is installed while
# any is, so guards may nest and be left in any order (by concurrent tasks).
_active: list[_Guard] = []
_lock = threading.Lock()


def _current_test() -> str | None:
    """The running pytest test's node id, as pytest publishes it, or None."""
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if not current:
        return None
    return current.rsplit(" (", 1)[0] if current.endswith(")") else current


def _where(origin: Origin) -> str:
    shown = f"{origin.scheme}://{origin.host}:{origin.port}"
    if origin.proxy is not None:
        shown += f" (through the proxy {origin.proxy.shown})"
    return shown


def _refuse(origin: Origin, provider: str) -> None:
    """The connect guard while the network is blocked: ``NetworkBlockedError``."""
    test = next((g.test for g in reversed(_active) if g.test is not None), None)
    test = test or _current_test()
    where = _where(origin)
    during = f" (test {test})" if test else ""
    raise NetworkBlockedError(
        f"trio-agent: {provider} tried to connect to {where} while the network is "
        f"blocked{during}; give the agent an offline model (ScriptedModel, ReplayModel)",
        origin=where,
        test=test,
    )


@contextmanager
def block_network(test: str | None = None) -> Iterator[None]:
    """While inside, every real provider (``OpenAIChatModel``, ``AnthropicModel``,
    ``OpenAIResponsesModel``) that would open a connection raises
    ``NetworkBlockedError`` instead, naming where it would have gone and
    ``test`` (default: the running pytest test, from ``PYTEST_CURRENT_TEST``).

    Process-wide (every thread, every trio run) for the duration; guards nest
    and may be left in any order; leaving the last one, by an error too,
    puts the real connect back. A connection a pool kept alive from before
    is still reused: the guard stops new ones. A synchronous context manager,
    usable in sync and ``async`` tests alike (nothing in it awaits, so it
    cannot be cancelled itself); a request it refuses fails at its first
    checkpoint.
    """
    guard = _Guard(test)
    with _lock:  # threads enter and leave too: the list and the hook change as one
        if not _active:
            add_connect_guard(_refuse)
        _active.append(guard)
    try:
        yield
    finally:
        with _lock:
            _active.remove(guard)  # by identity: _Guard has no __eq__
            if not _active:
                remove_connect_guard(_refuse)
