"""``CallableModel``: a ``Model`` whose every response a function computes from the request."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, final

from ..model import ModelRequest
from ._scripted import ScriptedModel, ScriptedResponse

__all__ = ["CallableModel", "ResponseFunction"]

ResponseFunction = Callable[[ModelRequest], ScriptedResponse | Awaitable[ScriptedResponse]]
"""What ``CallableModel`` calls: ``fn(request)``, sync or async, giving a ``ScriptedResponse``."""


@final
class _CallableContext:
    """Opening it calls the function, then streams its answer as ``ScriptedModel`` would."""

    __slots__ = ("_every_chunk", "_fn", "_inner", "_request")

    def __init__(self, fn: ResponseFunction, request: ModelRequest, every_chunk: bool) -> None:
        self._fn = fn
        self._request = request
        self._every_chunk = every_chunk
        self._inner: Any = None

    async def __aenter__(self) -> Any:
        answer = self._fn(self._request)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, ScriptedResponse):
            raise TypeError(
                f"CallableModel: the function must return a ScriptedResponse "
                f"(build it with scripted_response), got {answer!r}"
            )
        # one-entry script: the chunks, checkpoints and faults are ScriptedModel's own
        script = ScriptedModel(
            (answer,), record_requests=False, chunk_checkpoints=self._every_chunk
        )
        self._inner = script.stream(self._request)
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._inner is not None:
            await self._inner.__aexit__(*exc_info)


@final
class CallableModel:
    """A ``Model`` that answers each request with ``fn(request)``.

    ``fn`` is a plain or an ``async`` function returning a ``ScriptedResponse``
    (``scripted_response(...)``: text, tool calls, and the same fault options
    as in a script). It is called once per request, when the stream is
    opened; the answer is then streamed exactly as ``ScriptedModel`` streams
    a scripted entry (``text_chunks``, ``hang_at``, ``raise_at``, ...). An
    exception from ``fn`` is the model's error, raised where the stream
    opens, as it is (a ``ModelError`` such as ``TransientModelError`` stays
    one, so a session retries it); returning anything but a
    ``ScriptedResponse`` raises ``TypeError``. ``requests`` records every
    request in order (``record_requests=False``: none), ``call_count`` counts them.

    Cancellation: an ``async`` ``fn`` is awaited inside the run's cancel
    scope, so a cancel lands at its own checkpoints (and ``trio.Cancelled``
    passes through it); a plain ``fn`` runs to its end without a checkpoint.
    Then, as in ``ScriptedModel``, opening the stream, each chunk and
    ``response()`` are checkpoints (``chunk_checkpoints=False``: the opening
    one only), so ``explore_cancellation`` can cancel at every one.
    """

    __slots__ = ("_count", "_every_chunk", "_fn", "_record", "requests")

    def __init__(
        self,
        fn: ResponseFunction,
        *,
        record_requests: bool = True,
        chunk_checkpoints: bool = True,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"CallableModel needs a callable, got {fn!r}")
        if type(record_requests) is not bool:
            raise TypeError(f"record_requests must be a bool, got {record_requests!r}")
        if type(chunk_checkpoints) is not bool:
            raise TypeError(f"chunk_checkpoints must be a bool, got {chunk_checkpoints!r}")
        self._fn = fn
        self._record = record_requests
        self._every_chunk = chunk_checkpoints
        self._count = 0
        self.requests: list[ModelRequest] = []

    @property
    def call_count(self) -> int:
        """How many streams were asked for."""
        return self._count

    def stream(self, request: ModelRequest) -> _CallableContext:
        """Open a stream for ``request`` (``fn`` runs when it is entered)."""
        self._count += 1
        if self._record:
            self.requests.append(request)
        return _CallableContext(self._fn, request, self._every_chunk)
