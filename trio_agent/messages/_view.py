"""``Transcript``: a frozen view of the first messages of a transcript's storage,
made in constant time, so that a request or a result of message 40,000 costs
what one of message 2 does.

The storage is a list its owner (the ``Conversation``) only ever appends to
past the longest view it handed out: a view never sees a message move, leave
or join (the owner changes a list a view shares only after replacing it with a
copy). A ``Transcript`` behaves as a tuple of messages does: indexing (a slice
is a tuple), iteration, ``len``, ``in``, ``count``, ``index``, ``+`` and ``*``,
ordering, hashing, and equality with a tuple or another ``Transcript`` of the
same messages. What it is not: a ``tuple`` instance; ``msgspec`` encodes it
with ``enc_hook=tuple`` (``tuple(transcript)`` copies it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeAlias, final, overload

from ._ir import AssistantMessage, Message, ToolResultMessage, UserMessage

__all__ = ["MessageSequence", "Transcript", "Window", "transcript_hook"]

if TYPE_CHECKING:
    MessageSequence: TypeAlias = Sequence[Message]
else:  # what msgspec reads back and describes: an array, decoded as a tuple
    MessageSequence = tuple[Message, ...]
"""A field's type that holds a ``Transcript`` or a tuple: any frozen sequence of
messages to a type checker; a tuple to msgspec's decoders and schemas."""


@final
class Window:
    """What a shared ``Transcript`` reads: the first ``length`` of ``items``, which
    their owner promises never to change again."""

    __slots__ = ("items", "length")

    def __init__(self, items: list[Message], length: int) -> None:
        self.items = items
        self.length = length


@final
class Transcript(Sequence[Message]):
    """A frozen sequence of messages (see the module's doc).

    ``Transcript(messages)`` copies any sequence of messages; the library makes
    them of a ``Window`` on its own transcript, in constant time."""

    __slots__ = ("_items", "_length")

    _items: list[Message]
    _length: int

    def __init__(self, messages: Sequence[Message] | Window = ()) -> None:
        if type(messages) is Window:
            self._items = messages.items
            self._length = messages.length
        else:
            if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
                raise TypeError(f"Transcript takes a sequence of messages, not {messages!r:.80}")
            items = list(messages)
            for item in items:
                if not isinstance(item, UserMessage | AssistantMessage | ToolResultMessage):
                    raise TypeError(f"Transcript takes messages only, not {item!r:.80}")
            self._items = items
            self._length = len(items)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._length][index])
        length = self._length
        position = index.__index__()
        if position < 0:
            position += length
        if not 0 <= position < length:
            raise IndexError("transcript index out of range")
        return self._items[position]

    def __iter__(self) -> Iterator[Message]:
        return islice(self._items, self._length)

    def __reversed__(self) -> Iterator[Message]:
        items = self._items
        return (items[i] for i in range(self._length - 1, -1, -1))

    def __contains__(self, value: object) -> bool:
        return any(m is value or m == value for m in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Transcript):
            return len(other) == self._length and tuple(self) == tuple(other)
        if isinstance(other, tuple):
            return len(other) == self._length and tuple(self) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def _ordered(self, other: object) -> tuple[Message, ...] | None:
        if isinstance(other, Transcript):
            return tuple(other)
        if isinstance(other, tuple):
            return other
        return None

    def __lt__(self, other: object) -> bool:
        theirs = self._ordered(other)
        return NotImplemented if theirs is None else tuple(self) < theirs

    def __le__(self, other: object) -> bool:
        theirs = self._ordered(other)
        return NotImplemented if theirs is None else tuple(self) <= theirs

    def __gt__(self, other: object) -> bool:
        theirs = self._ordered(other)
        return NotImplemented if theirs is None else tuple(self) > theirs

    def __ge__(self, other: object) -> bool:
        theirs = self._ordered(other)
        return NotImplemented if theirs is None else tuple(self) >= theirs

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: object) -> tuple[Message, ...]:
        theirs = self._ordered(other)
        if theirs is None:
            return NotImplemented
        return (*self, *theirs)

    def __radd__(self, other: object) -> tuple[Message, ...]:
        theirs = self._ordered(other)
        if theirs is None:
            return NotImplemented
        return (*theirs, *self)

    def __mul__(self, count: int) -> tuple[Message, ...]:
        return tuple(self) * count

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"Transcript({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Transcript, (tuple(self),))

    def __copy__(self) -> Transcript:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Transcript:
        return self  # frozen, of frozen messages


def transcript_hook(value: object) -> tuple[Message, ...]:
    """msgspec's ``enc_hook`` for what holds a ``Transcript``: its messages, as a
    tuple; ``TypeError`` for anything else, as msgspec says it."""
    if type(value) is Transcript:
        return tuple(value)
    raise TypeError(f"Encoding objects of type {type(value).__qualname__} is unsupported")
