"""The context of a running tool call: its ``call``, the turn's ``deps``, and
progress reports.

A call run with progress support (a tool declared ``progress=True``, as every
``@tool`` that takes a ``ToolContext`` is) gets a ``ToolContext`` whose reports
become ``tool.updated`` events; ``CURRENT`` holds it for the call's task (and
the tasks it starts). Outside such a call ``tool_context()`` returns one whose
reports go nowhere and whose ``deps`` is None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Generic, final

import trio

from ..limits import without_lone_surrogates
from ..messages._ir import ToolCall

__all__ = [
    "CURRENT",
    "MAX_PROGRESS_TEXT",
    "PROGRESS_INTERVAL",
    "DepsT",
    "ToolContext",
    "is_context_type",
    "tool_context",
]

if TYPE_CHECKING:  # a default (PEP 696): a bare ``ToolContext`` is ``ToolContext[Any]``
    from typing_extensions import TypeVar

    DepsT = TypeVar("DepsT", default=Any)
else:
    from typing import TypeVar

    DepsT = TypeVar("DepsT")

MAX_PROGRESS_TEXT = 1000
"""Characters of one progress report; longer text is cut."""
PROGRESS_INTERVAL = 0.05
"""Seconds between two progress reports of one call that are passed on; faster ones
are dropped."""


@final
class ToolContext(Generic[DepsT]):
    """What a running tool call can use: its ``call``, the turn's ``deps``, and
    ``report()`` for progress.

    ``deps`` is what the turn was given (``agent.prompt(..., deps=x)``,
    ``run_agent_loop(..., deps=x)``), the same object, never copied and never
    recorded; None when none was given. Annotate the parameter
    ``ToolContext[MyDeps]`` and a type checker knows ``ctx.deps`` is a ``MyDeps``.

    ``idempotency_key`` is ``"{session_id}/{call_id}"``: the same in every process
    that runs the call, or runs it again after a crash (a tool declared
    ``effect="idempotent"`` is run again on resume when its first run's outcome
    is unknown). Pass it to an API that deduplicates (an HTTP
    ``Idempotency-Key`` header, a database unique key) so the effect happens
    once. A session without a store uses its agent's own id, a bare run its
    run's; outside a call it is "".

    Reports are passed on as ``tool.updated`` events, at most one per
    ``PROGRESS_INTERVAL`` seconds (trio's clock) and ``MAX_PROGRESS_TEXT``
    characters each; faster ones, unusable ones and those after the call
    finished are dropped and counted in ``dropped``. ``report`` never raises
    and may be called from a worker thread (``trio.to_thread``) too.
    """

    __slots__ = ("_last", "_sink", "_token", "call", "deps", "dropped", "idempotency_key")

    def __init__(
        self,
        call: ToolCall,
        sink: Callable[[str, float | None], None] | None,
        deps: DepsT = None,  # type: ignore[assignment]  # None: the turn was given none
        idempotency_key: str = "",
    ) -> None:
        self.call = call
        self.deps = deps
        self.idempotency_key = idempotency_key
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
            except Exception:  # not a number, an int too big for a float, a __float__ that raises
                fraction = math.nan
            if not math.isfinite(fraction):  # nan, or an infinity: no place in [0, 1]
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


CURRENT: ContextVar[ToolContext[Any] | None] = ContextVar("trio_agent_tool_context", default=None)


def tool_context() -> ToolContext[Any]:
    """The context of the tool call running in this task.

    Outside a call, or in a call run without progress support (a tool not
    declared ``progress=True``), reports go nowhere and ``deps`` is None.
    """
    context = CURRENT.get()
    return ToolContext(ToolCall("", "", {}), None) if context is None else context


def is_context_type(annotation: object) -> bool:
    """Whether a parameter annotated so receives the call's ``ToolContext``:
    ``ToolContext`` itself or ``ToolContext[D]``."""
    return annotation is ToolContext or getattr(annotation, "__origin__", None) is ToolContext
