"""Partial typed output for UIs: the answer of ``output_type=`` read while it streams.

A typed answer reaches the event stream in one of two ways (see ``_output.py``):

- native mode: the answer is JSON text, streamed as ``TextDelta`` chunks of the
  step that gives it;
- tool mode: a ``ToolCall`` named ``OUTPUT_TOOL_NAME`` whose arguments are the
  answer, which arrives whole as one chunk.

A type whose JSON Schema is not an object (``list[int]``, ``int``, a
``Literal``, a union, an ``array_like`` Struct) travels wrapped as
``{"response": value}``; an object type (Struct, dataclass, attrs class,
TypedDict, ``dict``) travels as itself. ``str`` is plain text (with or
without a validator): the answer is the step's text, no JSON.

``PartialOutput`` is the pure state machine (no I/O): feed it every event,
it answers a new partial value whenever the text so far can be read as one.
``partial_output`` wraps it around an async iterable of events (an ``AgentRun``
or ``TurnRun`` inside ``async with``) as an async iterator of partial values.

How a prefix is read: see ``_scan``. The JSON text of the current
attempt goes through an incremental scanner that looks at each character once
and keeps the value read so far; a reading of the prefix is, from the richest
to the poorest, the value with the string being written as far as it is whole,
then the value cut after the last complete member of each open container (a
dangling key, a number that could still grow, a partial ``tru`` are never in a
reading).

A reading is converted to the output type (to its ``{"response": ...}``
wrapper when wrapped), as the output tool's arguments are: by msgspec, or by
pydantic for a pydantic type; when that fails, the JSON path of the error
names the unfinished member, and the next try is the cut that drops it. The whole answer, once its
last brace arrives, is decoded from its text as the loop decodes a native
answer, so the last value is the run's output. So a typed value appears only
once the answer so far converts: a Struct's required fields must all have
started (a partial string, an empty list...), a ``Literal`` or a ``datetime``
string appears only whole, and the half-written last element of a
``list[Item]`` is left out until it converts. The richest plain reading
(unwrapped) is always there as ``PartialOutput.json``, for a UI that shows
what does not convert yet; ``PartialOutput(Any)`` yields plain readings.

Every partial value is consistent with the final one: strings are prefixes of
the final strings, lists prefixes of the final lists, objects hold a subset of
the final keys (a Struct field not sent yet holds its default).

Cost. The scan is linear in the answer, and each completed member is decoded
and converted once (see ``_scan.PrefixScanner``). A delta that changes
the reading costs a shallow copy of the open containers and one
``msgspec.convert`` of them, which passes the converted members through (C,
about 20 ns a member on this project's machines); a delta that changes nothing
readable (inside a number, a key, whitespace) costs the scan only; an object
that misses a required field is not converted again until another of its
members starts. So the total is linear in deltas x open-container size, never
deltas x answer in Python. A 60,000-character answer in 1,000 deltas costs 13
to 260 ms in all by shape on a slow, noisy machine, 100 to 600 times one
decode of the whole answer (``benchmarks/partial_output.py``). A pydantic type
is validated whole at each reading that changes (its members are not kept
converted): deltas x answer, in pydantic's Rust.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Generic, TypeVar, final, overload

import msgspec

from ..events import ModelChunk
from ..limits import OUTPUT_TOOL_NAME
from ..messages._ir import ToolCall
from ..model import TextDelta
from ..tools._codec import json_type
from ..tools._types import MsgspecType, TypeMismatch
from ._scan import MISSING, Layouts, PrefixScanner

__all__ = ["PartialOutput", "PartialOutputIterator", "is_wrapped", "partial_output"]

T = TypeVar("T")

# -------------------------------------------------------------- wrapping rule


def is_wrapped(output_type: Any) -> bool:
    """Whether ``output_type`` travels as ``{"response": value}``: its JSON Schema is
    not an object (the rule of ``output_spec``). A type that cannot be described
    counts as wrapped (``output_type=`` refuses it anyway)."""
    try:
        return json_type(output_type).wrapped
    except TypeError:
        return True


# --------------------------------------------------------------- the machine


@final
class PartialOutput(Generic[T]):
    """Partial values of a typed answer, from the events of a run, for UIs.

    ``feed(event)`` every event, in order; it returns a new partial value of
    ``output_type`` when the answer so far reads as one that differs from the
    last returned, else None (also for every event that is not a
    ``model.chunk``). Pure: no I/O, no awaits, cheap on events it ignores.

    What is read: the text deltas of the current attempt (native mode, or
    ``str`` as plain text), or the arguments of a ``final_result`` tool call,
    which arrive whole (tool mode: the value comes at once, and text after it
    in that attempt is ignored). A chunk with a new ``request_id`` or a new
    ``attempt`` starts over: a retried attempt or the next step replaces what
    was read (chunks of a failed attempt are void, and a step's text before a
    tool call is not the answer). A UI shows the latest value; when
    ``request_id`` or ``attempt`` changes, what it showed is void.

    ``wrapped`` overrides the rule that decides whether the answer travels as
    ``{"response": value}`` (the type's JSON Schema is not an object); for
    ``str`` the default is plain text (as the loop asks for it), and
    ``wrapped=True`` reads a ``{"response": "..."}`` JSON answer instead.

    A value that is legitimately None (``output_type=int | None``) comes out of
    ``feed`` as None too: use ``advance`` and ``value``, or ``partial_output``,
    which yields it. Values may share objects with the machine (``dict`` or
    ``Any`` outputs): do not mutate them. Partial values are what the stream
    says, for display: the run's ``output`` is the answer the loop accepted
    (after its ``output_validator``, and after its retries).
    """

    __slots__ = (
        "_accepted",
        "_as_text",
        "_attempt",
        "_codec",
        "_from_tool",
        "_good",
        "_json",
        "_json_level",
        "_layouts",
        "_missing",
        "_reader",
        "_request_id",
        "_text",
        "_tried",
        "_type",
        "_value",
        "_wrapped",
    )

    @overload
    def __init__(
        self: PartialOutput[T], output_type: type[T], *, wrapped: bool | None = None
    ) -> None: ...

    @overload
    def __init__(
        self: PartialOutput[Any], output_type: Any, *, wrapped: bool | None = None
    ) -> None: ...

    def __init__(self, output_type: Any, *, wrapped: bool | None = None) -> None:
        self._type: Any = output_type
        self._as_text = output_type is str and wrapped is None
        # how the output tool's arguments are converted (as ``output_spec`` does)
        self._codec = json_type(output_type, wrapped=True if self._as_text else wrapped)
        self._wrapped = self._codec.wrapped
        self._layouts: Layouts = {}
        self._request_id: str | None = None
        self._attempt = 0
        self._reader = PrefixScanner(self._root_type(), self._layouts)
        self._text = ""
        self._tried: tuple[int, int] | None = None
        self._missing: tuple[int, list[Any] | dict[str, Any], int] | None = None
        """An open object that misses a required field, and its member count then."""
        self._json_level = -1
        self._from_tool = False
        self._accepted = False
        self._json: Any = msgspec.UNSET
        self._value: T | msgspec.UnsetType = msgspec.UNSET
        self._good: Any = MISSING

    # -- what a UI reads
    @property
    def value(self) -> T | msgspec.UnsetType:
        """The last partial value of the current attempt, or ``msgspec.UNSET``."""
        return self._value

    @property
    def json(self) -> Any:
        """The richest plain-JSON reading of the current attempt's answer so far
        (unwrapped: the ``response``), also when it does not convert to the output
        type yet (a Struct missing required fields, a half-written ``Literal``);
        ``msgspec.UNSET`` before anything reads. For ``str`` as plain text, the
        text. Shared with the machine: do not mutate it."""
        if self._json_level >= 0:
            plain = self._reader.reading(self._json_level, typed=False)
            self._json_level = -1
            if plain is not MISSING:
                self._read_json(plain)
        return self._json

    @property
    def request_id(self) -> str | None:
        """The request whose chunks are being read (None before the first chunk)."""
        return self._request_id

    @property
    def attempt(self) -> int:
        """The attempt whose chunks are being read (0 before the first chunk)."""
        return self._attempt

    @property
    def wrapped(self) -> bool:
        """Whether the answer is read as ``{"response": value}``."""
        return self._wrapped

    # -- feeding
    def feed(self, event: object) -> T | None:
        """Read ``event``; a new partial value, or None when there is none (see the class)."""
        if self.advance(event):
            value = self._value
            return None if isinstance(value, msgspec.UnsetType) else value
        return None

    def advance(self, event: object) -> bool:
        """Read ``event``; True when ``value`` holds a new partial value."""
        if type(event) is not ModelChunk:
            return False
        if event.request_id != self._request_id or event.attempt != self._attempt:
            self._restart(event.request_id, event.attempt)
        chunk = event.chunk
        if type(chunk) is TextDelta:
            if self._from_tool or not chunk.text:
                return False
            if self._as_text:  # every delta makes a new, longer text
                self._text += chunk.text
                self._json = self._text
                self._value = self._text  # type: ignore[assignment]  # T is str here
                return True
            self._reader.push(chunk.text)
            return self._read_text()
        if type(chunk) is ToolCall and chunk.name == OUTPUT_TOOL_NAME and not self._accepted:
            # the whole answer: text after it is not it, and the loop keeps the
            # first call that fits (a later one changes nothing)
            self._from_tool = True
            self._json_level = -1
            self._read_json(chunk.arguments)
            try:
                value = self._codec.convert(chunk.arguments)
            except Exception:  # refused, or a hook of the type's that raised
                return False
            self._accepted = True
            return self._offer(value, MISSING)
        return False

    def _root_type(self) -> Any:
        """The type the scanner converts completed members to: msgspec's, member by
        member; for a pydantic type none (readings stay plain, validated whole)."""
        codec = self._codec
        return codec.travels if isinstance(codec, MsgspecType) else MISSING

    def _restart(self, request_id: str, attempt: int) -> None:
        self._request_id, self._attempt = request_id, attempt
        self._reader = PrefixScanner(self._root_type(), self._layouts)
        self._text = ""
        self._tried = None
        self._missing = None
        self._json_level = -1
        self._from_tool = False
        self._accepted = False
        self._json = msgspec.UNSET
        self._value = msgspec.UNSET
        self._good = MISSING

    def _read_text(self) -> bool:
        """Convert the richest reading, then, while msgspec refuses, the cut that
        drops the member its error's JSON path names (skipping the cuts in
        between, which would fail the same way). The whole answer is decoded
        from its text, as the loop decodes a native answer, so the last value is
        the run's output even where conversion is stricter than decoding (the
        integer keys of a ``dict[int, ...]``)."""
        reader = self._reader
        if reader.broken:
            return False
        if reader.complete:
            level = 0
        else:
            level = reader.depth if reader.in_value_string else reader.depth - 1
            if level < 0:
                return False  # a top-level number or literal, not yet whole
        # a reading changes with ``version``, or with the string being written
        seen = (reader.version, reader.string_safe if level == reader.depth else -1)
        if seen == self._tried:
            return False
        self._tried = seen
        self._json_level = level  # read when asked: most UIs never ask
        if reader.complete:  # the whole answer: read as the loop reads a native one
            try:
                value = self._codec.decode(reader.text)
            except Exception:  # not JSON, refused, or a hook of the type's that raised
                return False
            return self._offer(value, reader.reading(0, typed=True))
        if self._missing is not None:
            at, members, count = self._missing
            if at < reader.depth and reader.container(at) is members and len(members) == count:
                level = min(level, at - 1)  # it still misses that field: skip to the cut
            else:
                self._missing = None
        while level >= 0:
            reading = reader.reading(level, typed=True)
            if reading is MISSING:
                return False
            try:
                value = self._codec.convert(reading)
            except TypeMismatch as exc:
                at = exc.depth
                if at < level and exc.missing:
                    # the object at ``at`` was read with the member being written
                    # in it: it misses a field until another member starts there
                    members = reader.container(at)
                    self._missing = (at, members, len(members))
                level = min(level - 1, at - 1)
            except Exception:  # a hook of the type's (``__post_init__``) that raised
                level -= 1
            else:
                return self._offer(value, reading)
        return False

    def _read_json(self, plain: Any) -> None:
        if not self._wrapped:
            self._json = plain
        elif type(plain) is dict and "response" in plain:
            self._json = plain["response"]

    def _offer(self, value: Any, reading: Any) -> bool:
        """Keep ``value`` (unwrapped) when it differs from the last one. Readings are
        compared first: the same reading converts to the same value, and comparing
        them is cheap (their complete members are the same objects)."""
        if not isinstance(self._value, msgspec.UnsetType):
            if reading is not MISSING and reading == self._good:
                return False
            if value == self._value:  # a change the type ignores (an unknown field)
                self._good = reading
                return False
        self._value, self._good = value, reading
        return True


# ------------------------------------------------------------- the iterator


@final
class PartialOutputIterator(AsyncIterator[T]):
    """Async iterator of the partial values of a typed answer: ``partial_output``.

    A class, not an async generator (DESIGN section 10). ``__anext__`` awaits
    only the source's next event, so cancellation lands there and nowhere else:
    whether the event is lost is the source's business (an ``AgentRun`` loses
    none), no state here changes, and iterating again goes on. It never closes
    the source: the caller owns it (the run's ``async with``). The events
    themselves are consumed here; a UI that also needs them feeds a
    ``PartialOutput`` from its own loop instead.
    """

    __slots__ = ("_events", "_iterator", "_state")

    def __init__(self, events: AsyncIterable[object], state: PartialOutput[T]) -> None:
        self._events = events
        self._iterator: AsyncIterator[object] | None = None
        self._state = state

    @property
    def state(self) -> PartialOutput[T]:
        """The machine being fed (its ``json``, ``request_id``, ``attempt``)."""
        return self._state

    def __aiter__(self) -> PartialOutputIterator[T]:
        return self

    async def __anext__(self) -> T:
        if self._iterator is None:
            self._iterator = aiter(self._events)
        state = self._state
        while True:
            event = await anext(self._iterator)  # StopAsyncIteration ends us too
            if state.advance(event):
                value = state.value
                assert not isinstance(value, msgspec.UnsetType)
                return value


@overload
def partial_output(
    events: AsyncIterable[object], output_type: type[T], *, wrapped: bool | None = None
) -> PartialOutputIterator[T]: ...


@overload
def partial_output(
    events: AsyncIterable[object], output_type: Any, *, wrapped: bool | None = None
) -> PartialOutputIterator[Any]: ...


def partial_output(
    events: AsyncIterable[object], output_type: Any, *, wrapped: bool | None = None
) -> PartialOutputIterator[Any]:
    """Iterate the partial values of the typed answer in ``events`` (an ``AgentRun``
    or ``TurnRun`` inside its ``async with``), each a new value of ``output_type``;
    the iteration ends with the events. See ``PartialOutput`` for what is read and
    when a value comes, and ``PartialOutputIterator`` for cancellation::

        async with run_agent_loop(..., output_type=Recipe) as run:
            async for recipe in partial_output(run, Recipe):
                show(recipe)
        result = run.result
    """
    return PartialOutputIterator(events, PartialOutput(output_type, wrapped=wrapped))
