"""The context of a running tool call: its ``call``, and progress reports.

A call run with progress support (a tool declared ``progress=True``) gets a
``ToolContext`` whose reports become ``tool.updated`` events; ``CURRENT``
holds it for the call's task (and the tasks it starts). Outside such a call
``tool_context()`` returns one whose reports go nowhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import final

import trio

from ..limits import without_lone_surrogates
from ..messages._ir import ToolCall

__all__ = ["CURRENT", "MAX_PROGRESS_TEXT", "PROGRESS_INTERVAL", "ToolContext", "tool_context"]

MAX_PROGRESS_TEXT = 1000
"""Characters of one progress report; longer text is cut."""
PROGRESS_INTERVAL = 0.05
"""Seconds between two progress reports of one call that are passed on; faster ones
are dropped."""


@final
class ToolContext:
    """What a running tool call can use: its ``call``, and ``report()`` for progress.

    Reports are passed on as ``tool.updated`` events, at most one per
    ``PROGRESS_INTERVAL`` seconds (trio's clock) and ``MAX_PROGRESS_TEXT``
    characters each; faster ones, unusable ones and those after the call
    finished are dropped and counted in ``dropped``. ``report`` never raises
    and may be called from a worker thread (``trio.to_thread``) too.
    """

    __slots__ = ("_last", "_sink", "_token", "call", "dropped")

    def __init__(self, call: ToolCall, sink: Callable[[str, float | None], None] | None) -> None:
        self.call = call
        self._sink = sink
        self._last = -math.inf
        self._token: trio.lowlevel.TrioToken | None = None
        if sink is not None:
            self._token = trio.lowlevel.current_trio_token()
        self.dropped = 0

    def report(self, message: object, fraction: float | None = None) -> None:
        """Report progress: ``message`` (made a str) and an optional ``fraction`` in [0, 1]
        (clamped; anything that is not a finite number is dropped). Never blocks."""
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:  # a worker thread: hand the report to the trio thread
            token = self._token
            if token is None:
                self.dropped += 1
                return
            try:
                token.run_sync_soon(self.report, message, fraction)
            except trio.RunFinishedError:
                self.dropped += 1
            return
        sink = self._sink
        now = trio.current_time()
        if sink is None or now - self._last < PROGRESS_INTERVAL:
            self.dropped += 1
            return
        if fraction is not None:
            try:
                fraction = float(fraction)
            except (TypeError, ValueError):
                fraction = math.nan
            if math.isnan(fraction):
                self.dropped += 1
                return
            fraction = min(1.0, max(0.0, fraction))
        self._last = now
        try:
            text = message if type(message) is str else str(message)
        except Exception:
            self.dropped += 1
            return
        if len(text) > MAX_PROGRESS_TEXT:
            text = text[:MAX_PROGRESS_TEXT]
        sink(without_lone_surrogates(text), fraction)

    def close(self) -> None:
        """The call finished: later reports are dropped."""
        self._sink = None


CURRENT: ContextVar[ToolContext | None] = ContextVar("trio_agent_tool_context", default=None)


def tool_context() -> ToolContext:
    """The context of the tool call running in this task.

    Outside a call, or in a call run without progress support (a tool not
    declared ``progress=True``), reports go nowhere.
    """
    context = CURRENT.get()
    return ToolContext(ToolCall("", "", {}), None) if context is None else context
