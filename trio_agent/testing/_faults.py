"""``FaultyModel``: inject named, reproducible faults into any ``Model``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, final

import attrs
import msgspec
import trio

from ..messages._ir import TextBlock
from ..model import ModelRequest, TextDelta, TransientModelError
from ._reraise import replayable

__all__ = [
    "CorruptChunk",
    "CutStream",
    "DisagreeingResponse",
    "Fault",
    "FaultyModel",
    "HangAt",
    "RaiseOnCall",
]


def _error_key(error: BaseException) -> tuple[Any, ...]:
    """What makes two scripted errors the same: their type, ``args`` and public
    attributes (``retry_after``); not their identity, nor the traceback a fault
    keeps once it has fired."""
    public = {name: value for name, value in vars(error).items() if not name.startswith("_")}
    return (type(error), error.args, public)


def _same_error(a: BaseException, b: BaseException) -> bool:
    return a is b or _error_key(a) == _error_key(b)


_BY_VALUE = attrs.cmp_using(eq=_same_error)
"""How a fault's ``error`` field compares: by value (``_error_key``); it is left out
of the hash (``hash=False``), so equal faults hash alike whatever their errors hold."""


@final
@attrs.frozen
class RaiseOnCall:
    """Stream call ``call`` (1-based) raises ``error`` when it opens, before the inner
    model is asked: it uses up no script entry of a ``ScriptedModel``."""

    call: int
    error: Exception = attrs.field(
        factory=lambda: TransientModelError("503 service unavailable"), eq=_BY_VALUE, hash=False
    )
    name = "raise"


@final
@attrs.frozen
class HangAt:
    """Stream call ``call`` hangs before chunk ``chunk`` (0-based; past the last chunk:
    in ``response()``); the inner stream is open: it uses up a script entry."""

    call: int
    chunk: int = 0
    name = "hang"


@final
@attrs.frozen
class CutStream:
    """Stream call ``call`` drops the connection after ``after`` chunks (mid-call); the
    inner stream was opened: it uses up a script entry."""

    call: int
    after: int = 1
    error: Exception = attrs.field(
        factory=lambda: TransientModelError("connection dropped mid-stream"),
        eq=_BY_VALUE,
        hash=False,
    )
    name = "cut"


@final
@attrs.frozen
class CorruptChunk:
    """Stream call ``call`` yields a corrupt chunk in place of chunk ``chunk`` (read
    from the inner stream and dropped): it uses up a script entry."""

    call: int
    chunk: int = 0
    name = "corrupt"


@final
@attrs.frozen
class DisagreeingResponse:
    """Stream call ``call`` returns a response that disagrees with its stream (the
    inner one's, changed): it uses up a script entry."""

    call: int
    name = "disagree"


Fault = RaiseOnCall | HangAt | CutStream | CorruptChunk | DisagreeingResponse
_KINDS = (RaiseOnCall, CutStream, CorruptChunk, DisagreeingResponse)
"""Kinds a seed draws from by default; ``HangAt`` hangs, so it is opt-in (``kinds=``)."""


@final
class FaultyModel:
    """Wraps any ``Model`` and injects faults on chosen stream calls.

    Give the faults explicitly (``faults=[CutStream(call=2, after=3)]``), or
    let a seed choose: ``FaultyModel(inner, seed=7, rate=0.3)`` gives each
    call a fault with probability ``rate``, of a kind and position drawn from
    the seeded generator, so the same seed gives the same faults (``HangAt``
    only if listed in ``kinds``). ``injected`` lists the faults that fired
    (a fault placed past the end of a stream does not), to reproduce a
    failing case with ``faults=``. Faults compare (and hash) by value, errors
    included (type, ``args``, public attributes), so ``injected`` can be
    asserted: ``model.injected == [CutStream(2, after=3)]``.

    Every stream call counts in ``calls``, faulty or not. ``RaiseOnCall``
    fails before the inner model is asked, so the inner model (a
    ``ScriptedModel``'s script) sees one call fewer; every other fault opens
    the inner stream and uses up its response.
    """

    def __init__(
        self,
        inner: Any,
        faults: Sequence[Fault] = (),
        *,
        seed: int | None = None,
        rate: float = 0.0,
        kinds: Sequence[type] = _KINDS,
    ) -> None:
        if not callable(getattr(inner, "stream", None)):
            raise TypeError(f"inner must be a Model, got {inner!r}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate!r}")
        if rate > 0 and seed is None:
            raise ValueError("random faults need a seed, so that a failure can be reproduced")
        self._faults: dict[int, Fault] = {}
        for fault in faults:
            if fault.call in self._faults:
                raise ValueError(f"two faults for stream call {fault.call}; give one per call")
            self._faults[fault.call] = fault
        self._inner = inner
        self._random = random.Random(seed) if seed is not None else None
        self._rate = rate
        self._kinds = tuple(kinds)
        self.calls = 0
        self.injected: list[Fault] = []

    def _fault_for(self, call: int) -> Fault | None:
        fault = self._faults.get(call)
        if fault is None and self._random is not None and self._random.random() < self._rate:
            kind = self._random.choice(self._kinds)
            position = self._random.randrange(3)
            fault = (
                kind(call=call)
                if kind in (RaiseOnCall, DisagreeingResponse)
                else kind(call, position)
            )
        return fault

    def stream(self, request: ModelRequest) -> _FaultyContext:
        self.calls += 1
        return _FaultyContext(self._inner, request, self._fault_for(self.calls), self.injected)


@final
class _FaultyContext:
    def __init__(
        self, inner: Any, request: ModelRequest, fault: Fault | None, fired: list[Fault]
    ) -> None:
        self._inner_model = inner
        self._request = request
        self._fault = fault
        self._fired = fired
        self._context: Any = None
        self._stream: Any = None
        self._chunks = 0

    async def __aenter__(self) -> _FaultyContext:
        if isinstance(self._fault, RaiseOnCall):
            await trio.lowlevel.checkpoint()
            self._fired.append(self._fault)
            raise replayable(self._fault.error)
        self._context = self._inner_model.stream(self._request)
        self._stream = await self._context.__aenter__()
        self._iterator = self._stream.__aiter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        if self._context is not None:
            return await self._context.__aexit__(*exc_info)
        return None

    def __aiter__(self) -> _FaultyContext:
        return self

    async def __anext__(self) -> Any:
        fault, index = self._fault, self._chunks
        if isinstance(fault, HangAt) and fault.chunk == index:
            self._fired.append(fault)
            await trio.sleep_forever()
        if isinstance(fault, CutStream) and fault.after == index:
            self._fired.append(fault)
            raise replayable(fault.error)
        chunk = await self._iterator.__anext__()
        self._chunks += 1
        if isinstance(fault, CorruptChunk) and fault.chunk == index:
            self._fired.append(fault)
            return TextDelta("corrupt \ud800 chunk")  # a lone surrogate: a protocol error
        return chunk

    async def response(self) -> Any:
        fault = self._fault
        if isinstance(fault, HangAt) and fault.chunk >= self._chunks:
            self._fired.append(fault)
            await trio.sleep_forever()
        if isinstance(fault, CutStream) and fault.after >= self._chunks:
            self._fired.append(fault)
            raise replayable(fault.error)
        response = await self._stream.response()
        if isinstance(fault, DisagreeingResponse):
            self._fired.append(fault)
            content = (*response.content, TextBlock(" (not what was streamed)"))
            return msgspec.structs.replace(response, content=content)
        return response
