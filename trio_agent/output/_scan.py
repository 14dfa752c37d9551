"""The JSON-prefix scanner behind ``PartialOutput`` (``_partial.py``), and the
layouts of the output types it reads.

How a prefix is read. The JSON text of the current attempt goes through an
incremental reader (``PrefixScanner``) that looks at each character once
(string contents are skipped with a regex) and builds the plain JSON value as
it goes: each completed string, number, literal, array or object is decoded
once, by msgspec, and kept. The open containers form a chain from the top
value down to what is being written; a reading of the prefix is a shallow copy
of that chain (the completed members are shared), from the richest to the
poorest:

1. the chain with the string value being written, as far as it is whole (a
   partial string grows character by character; an escape cut in the middle,
   ``\\u00`` or a lone high surrogate, is left out until it is whole);
2. for an open container, the chain cut after its last complete member: a
   dangling key, colon or comma, a number that could still grow (``12`` may
   become ``123``), a partial ``tru`` are never in a reading, and a cut at a
   shallower level also drops the member being written there (the
   half-written last element of a list, the field being written).

Where the type of a container's members is known (its layout: ``_layout``),
each completed member is also converted to it once, so a typed reading costs
what the open containers hold, not the whole answer (see ``PrefixScanner``).
A refused reading's ``TypeMismatch`` says how deep the member it is about is,
so that ``PartialOutput`` can try the cut that drops it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import re
import types
import typing
from typing import Annotated, Any, Final, Literal, final

import attrs
import msgspec

from ..limits import MAX_ARGUMENT_DEPTH

__all__ = ["MISSING", "Layouts", "PrefixScanner"]

# ------------------------------------------------------------------ scanner

_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING_STOP: Final = re.compile(r'["\\]')
_NUMBER_CHARS: Final = re.compile(r"[-+0-9.eE]*")
_LETTERS: Final = re.compile(r"[a-z]*")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_LITERALS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}

# What the reader expects next.
_VALUE: Final = 0  # a value: at the start, after ':' or after ',' in an array
_VALUE_OR_CLOSE: Final = 1  # just after '['
_KEY: Final = 2  # after ',' in an object
_KEY_OR_CLOSE: Final = 3  # just after '{'
_COLON: Final = 4
_AFTER: Final = 5  # after a value in a container: ',' or the closer
_STRING: Final = 6  # inside a string (a key when ``_key``)
_NUMBER: Final = 7  # inside a number
_LITERAL: Final = 8  # inside true / false / null
_DONE: Final = 9  # the top-level value is complete
_BROKEN: Final = 10  # not JSON: nothing more is read


@final
class _Missing:
    """No reading at that level; no known type for that member."""


MISSING: Final = _Missing()


# ------------------------------------------------------------------ layouts


@final
class _Layout:
    """The member types of a container type, as far as they are known: by key
    (``fields``), by position (``items``), else ``rest`` (``MISSING``: unknown)."""

    __slots__ = ("fields", "items", "rest")

    def __init__(
        self, *, fields: dict[str, Any] | None = None, items: tuple[Any, ...] = (), rest: Any
    ) -> None:
        self.fields = fields
        self.items = items
        self.rest = rest

    def member(self, key: str | int) -> Any:
        """The type of the member at ``key`` (an object's key, an array's index)."""
        if isinstance(key, int):
            return self.items[key] if key < len(self.items) else self.rest
        return self.rest if self.fields is None else self.fields.get(key, self.rest)


@final
class _Opaque:
    """A type that may be read from this kind of container, with members unknown."""


_OPAQUE: Final = _Opaque()
_NOT_CONTAINERS: Final = (str, bytes, bytearray, int, float, bool, type(None))
Layouts = dict[tuple[Any, str], "_Layout | _Opaque | None"]
_SEQUENCES: Final = (
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
)
_MAPPINGS: Final = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def _layout(kind: Any, closer: str, cache: Layouts) -> _Layout | _Opaque | None:
    """How ``kind`` reads a JSON container (``closer``: ``}`` an object, ``]`` an
    array): its member types (``_Layout``), ``_OPAQUE`` when it may read one but
    its members are not known here, None when it cannot read one. Kept in
    ``cache`` (one per ``PartialOutput``: nothing global holds a type)."""
    try:
        return cache[kind, closer]
    except KeyError:
        keep = True
    except TypeError:  # an unhashable annotation
        keep = False
    try:
        layout = _resolve(kind, closer, cache)
    except Exception:  # whatever this type is, msgspec converts it: leave it to msgspec
        layout = _OPAQUE
    if keep:
        cache[kind, closer] = layout
    return layout


def _hints(cls: Any) -> dict[str, Any]:
    """The annotations of ``cls`` by name (a TypedDict's without ``Required`` or
    ``NotRequired``, which only say whether the key must be there)."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # a forward reference that does not resolve: members unknown
        return {}
    for name, hint in hints.items():
        while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
            hint = typing.get_args(hint)[0]
        hints[name] = hint
    return hints


def _resolve(kind: Any, closer: str, cache: Layouts) -> _Layout | _Opaque | None:
    """``_layout`` uncached: by the kind of type, as msgspec reads each."""
    if kind is MISSING or kind is Any or kind is object:
        return _OPAQUE
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated or origin is typing.Required or origin is typing.NotRequired:
        return _layout(args[0], closer, cache)
    if origin is typing.Union or origin is types.UnionType:
        arms = [_layout(arm, closer, cache) for arm in args]
        if any(arm is _OPAQUE for arm in arms):
            return _OPAQUE
        found = [arm for arm in arms if arm is not None]
        return found[0] if len(found) == 1 else (None if not found else _OPAQUE)
    if origin is Literal or kind in _NOT_CONTAINERS:
        return None
    cls = origin if origin is not None else kind
    if not isinstance(cls, type):
        return _OPAQUE
    if issubclass(cls, msgspec.Struct):
        config = cls.__struct_config__
        fields = msgspec.structs.fields(kind)
        if config.array_like:
            if closer == "}" or config.tag is not None:
                return None if closer == "}" else _OPAQUE
            return _Layout(items=tuple(field.type for field in fields), rest=MISSING)
        if closer == "]":
            return None
        return _Layout(fields={field.encode_name: field.type for field in fields}, rest=MISSING)
    if issubclass(cls, tuple):
        if closer == "}":
            return None
        if hasattr(cls, "_fields"):  # a NamedTuple
            hints = _hints(cls)
            return _Layout(
                items=tuple(hints.get(name, MISSING) for name in cls._fields), rest=MISSING
            )
        if len(args) == 2 and args[1] is Ellipsis:
            return _Layout(rest=args[0])
        return _Layout(items=args, rest=MISSING)
    if issubclass(cls, _SEQUENCES):
        if closer == "}":
            return None
        return _Layout(rest=args[0] if len(args) == 1 else MISSING)
    if typing.is_typeddict(cls) or issubclass(cls, _MAPPINGS):
        if closer == "]":
            return None
        if typing.is_typeddict(cls):
            return _Layout(fields=_hints(cls), rest=MISSING)
        return _Layout(rest=args[1] if len(args) == 2 else MISSING)
    if dataclasses.is_dataclass(cls) or attrs.has(cls):
        if closer == "]":
            return None
        if origin is not None:  # a parametrized generic class: leave it to msgspec
            return _OPAQUE
        hints = _hints(cls)
        names = (
            [field.name for field in dataclasses.fields(cls)]
            if dataclasses.is_dataclass(cls)
            else [field.name for field in attrs.fields(cls)]
        )
        return _Layout(fields={name: hints[name] for name in names if name in hints}, rest=MISSING)
    if issubclass(cls, enum.Enum):
        return None
    return _OPAQUE


def _typed(value: Any, kind: Any) -> Any:
    """``value`` converted to ``kind`` once and for all, or ``MISSING`` when it does
    not convert, or its converted form would not pass unchanged through a later
    conversion to ``kind`` (a reading must convert as its plain form would)."""
    if kind is MISSING or kind is Any or type(value) is kind:
        return value
    try:
        typed = msgspec.convert(value, kind, str_keys=True)
        if typed is not value:
            msgspec.convert(typed, kind)
    except Exception:  # refused, or a hook of the type's that raised: keep it plain
        return MISSING
    return typed


# -------------------------------------------------------------------- reader


@final
class PrefixScanner:
    """An incremental JSON reader over a growing text: it never scans a character
    twice, decodes each completed token once (msgspec, so strings, numbers and
    escapes read exactly as msgspec reads them), and answers readings of the
    prefix (``reading``), plain or typed.

    Typed: where the type of a container's members is known (the fields of a
    Struct, dataclass, attrs class or TypedDict, the items of a list, tuple or
    set, the values of a dict, an unambiguous union arm), each completed member
    is converted once, when it completes, and kept; converting a typed reading
    then passes those members through (msgspec returns a Struct it is given),
    so a delta costs what the open containers hold, not the whole answer. A
    member whose type is not known, or that does not convert, is kept plain,
    and the reading's conversion fails on it exactly as the plain one would.

    Structure is checked here (containers, keys, commas, colons); anything a
    token holds that is not JSON fails when msgspec decodes it, and the reader
    stops (``broken``): the final answer fails the same way. So does an answer
    nesting deeper than ``MAX_ARGUMENT_DEPTH`` containers (the output's limit).
    """

    __slots__ = (
        "_closers",
        "_decoded",
        "_decoded_to",
        "_key",
        "_keys",
        "_layout_cache",
        "_layouts",
        "_mode",
        "_plain",
        "_pos",
        "_root",
        "_root_type",
        "_root_typed",
        "_start",
        "_string_safe",
        "_typed",
        "text",
        "version",
    )

    def __init__(self, root_type: Any, layouts: Layouts) -> None:
        self.text = ""
        self._layout_cache = layouts
        self.version = 0
        """Bumped by every change to a reading but the growth of a partial string."""
        self._root_type = root_type
        self._pos = 0
        self._mode = _VALUE
        self._closers = ""  # closers of the open containers, innermost last
        self._plain: list[list[Any] | dict[str, Any]] = []  # their complete members
        self._typed: list[list[Any] | dict[str, Any]] = []  # the same, typed where known
        self._layouts: list[_Layout | None] = []
        self._keys: list[str] = []  # per open container: the key of the member being written
        self._key = False
        self._start = 0  # where the open token began
        self._string_safe = 0  # the open string's content is whole up to here
        self._decoded = ""  # the open string's content, decoded up to ``_decoded_to``
        self._decoded_to = 0
        self._root: Any = None
        self._root_typed: Any = None

    # -- reading the text
    def push(self, delta: str) -> None:
        """Read ``delta``, appended to the text."""
        self.text += delta
        if self._mode != _BROKEN:
            self._scan()

    def _member_type(self) -> Any:
        """The type of the member being written in the innermost open container."""
        if not self._plain:
            return self._root_type
        layout = self._layouts[-1]
        if layout is None:
            return MISSING
        if self._closers[-1] == "]":
            return layout.member(len(self._plain[-1]))
        return layout.member(self._keys[-1])

    def _complete(self, value: Any, typed: Any) -> None:
        self.version += 1
        if not self._plain:
            self._root, self._root_typed = value, typed
            self._mode = _DONE
            return
        plain, known = self._plain[-1], self._typed[-1]
        if known is not plain:
            typed = _typed(typed, self._member_type())
            if typed is MISSING:
                typed = value
        if type(plain) is list:
            plain.append(value)
            if known is not plain:
                known.append(typed)  # type: ignore[union-attr]
        else:
            key = self._keys[-1]
            plain[key] = value  # type: ignore[call-overload]
            if known is not plain:
                known[key] = typed  # type: ignore[call-overload]
        self._mode = _AFTER

    def _decode(self, token: str) -> Any:
        try:
            return msgspec.json.decode(token)
        except msgspec.DecodeError:
            self._mode = _BROKEN
            return MISSING

    def _open(self, closer: str) -> None:
        if len(self._plain) >= MAX_ARGUMENT_DEPTH:  # the loop refuses such an answer
            self._mode = _BROKEN
            return
        self.version += 1
        kind = self._member_type()
        layout = _layout(kind, closer, self._layout_cache) if kind is not MISSING else None
        plain: list[Any] | dict[str, Any] = {} if closer == "}" else []
        self._plain.append(plain)
        if type(layout) is _Layout:
            self._layouts.append(layout)
            self._typed.append({} if closer == "}" else [])
        else:
            self._layouts.append(None)
            self._typed.append(plain)
        self._closers += closer
        self._keys.append("")
        self._mode = _KEY_OR_CLOSE if closer == "}" else _VALUE_OR_CLOSE

    def _close(self) -> None:
        self._closers = self._closers[:-1]
        self._keys.pop()
        self._layouts.pop()
        self._complete(self._plain.pop(), self._typed.pop())

    def _scan(self) -> None:
        text = self.text
        n = len(text)
        i = self._pos
        while i < n and self._mode != _BROKEN:
            mode = self._mode
            if mode == _STRING:
                i = self._scan_string(text, i, n)
                if i < 0:  # waiting for the rest of an escape
                    i = self._string_safe
                    break
                continue
            if mode == _NUMBER:
                i = _NUMBER_CHARS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break  # it may still grow
                value = self._decode(text[self._start : i])
                if value is not MISSING:
                    self._complete(value, value)
                continue
            if mode == _LITERAL:
                i = _LETTERS.match(text, i).end()  # type: ignore[union-attr]
                word = text[self._start : i]
                if word in _LITERALS:
                    self._complete(_LITERALS[word], _LITERALS[word])
                elif i < n or not any(literal.startswith(word) for literal in _LITERALS):
                    self._mode = _BROKEN
                continue
            char = text[i]
            if char in " \t\n\r":
                i = _WHITESPACE.match(text, i).end()  # type: ignore[union-attr]
                continue
            i += 1
            if mode == _AFTER:
                if char == ",":
                    self._mode = _KEY if self._closers[-1] == "}" else _VALUE
                elif char == self._closers[-1]:
                    self._close()
                else:
                    self._mode = _BROKEN
            elif mode == _VALUE or mode == _VALUE_OR_CLOSE:
                if char == '"':
                    self._open_string(i, key=False)
                elif char == "{":
                    self._open("}")
                elif char == "[":
                    self._open("]")
                elif char == "]" and mode == _VALUE_OR_CLOSE:
                    self._close()
                elif char == "-" or "0" <= char <= "9":
                    self._mode, self._start = _NUMBER, i - 1
                elif char in "tfn":
                    self._mode, self._start = _LITERAL, i - 1
                else:
                    self._mode = _BROKEN
            elif mode == _KEY or mode == _KEY_OR_CLOSE:
                if char == '"':
                    self._open_string(i, key=True)
                elif char == "}" and mode == _KEY_OR_CLOSE:
                    self._close()
                else:
                    self._mode = _BROKEN
            elif mode == _COLON:
                self._mode = _VALUE if char == ":" else _BROKEN
            else:  # _DONE: trailing text is the decoder's business, not ours
                i = n
        self._pos = i

    def _open_string(self, at: int, *, key: bool) -> None:
        self._mode, self._key = _STRING, key
        self._start = at - 1  # the opening quote
        self._string_safe = self._decoded_to = at
        self._decoded = ""

    def _scan_string(self, text: str, i: int, n: int) -> int:
        """Go on in the open string from ``i``; the next position, or -1 when an
        escape is cut by the end of the text (``_string_safe`` is before it)."""
        found = _STRING_STOP.search(text, i)
        if found is None:
            self._string_safe = n
            return n
        j = found.start()
        self._string_safe = j
        if text[j] == '"':
            value = self._decode(text[self._start : j + 1])
            if value is not MISSING:
                if self._key:
                    self._keys[-1] = value
                    self._mode = _COLON
                else:
                    self._complete(value, value)
            return j + 1
        # an escape: left out of the partial string until it is whole
        if j + 1 >= n:
            return -1
        if text[j + 1] != "u":
            self._string_safe = j + 2
            return j + 2
        if j + 6 > n:
            return -1
        if _HEX4.fullmatch(text, j + 2, j + 6) is None:
            self._mode = _BROKEN
            return n
        end = j + 6
        if 0xD800 <= int(text[j + 2 : end], 16) < 0xDC00:
            # a high surrogate is whole only with the low one after it
            if end == n or (end + 1 == n and text[end] == "\\"):
                return -1
            if text.startswith("\\u", end):
                if end + 6 > n:
                    return -1
                end += 6
            # else a lone surrogate: msgspec refuses it when the string ends
        self._string_safe = end
        return end

    # -- what a reading is
    @property
    def depth(self) -> int:
        """Open containers: the outermost is at level 0 (its path depth in JSON)."""
        return len(self._plain)

    @property
    def complete(self) -> bool:
        """Whether the top-level value is whole."""
        return self._mode == _DONE

    @property
    def broken(self) -> bool:
        """Whether the text is not JSON (nothing more is read)."""
        return self._mode == _BROKEN

    @property
    def in_value_string(self) -> bool:
        """Whether a string value (not a key) is being written."""
        return self._mode == _STRING and not self._key

    def container(self, level: int) -> list[Any] | dict[str, Any]:
        """The complete members of the open container at ``level`` (the object itself:
        it stays the same object while the container is open)."""
        return self._plain[level]

    @property
    def string_safe(self) -> int:
        """How far the string being written is whole."""
        return self._string_safe

    def _partial_string(self) -> Any:
        if self._string_safe > self._decoded_to:
            more = self._decode('"' + self.text[self._decoded_to : self._string_safe] + '"')
            if more is MISSING:
                return MISSING
            self._decoded += more
            self._decoded_to = self._string_safe
        return self._decoded

    def reading(self, level: int, *, typed: bool) -> Any:
        """The value read so far at ``level``: below ``depth``, the open containers
        down to that level, the one at that level with its complete members only;
        at ``depth``, all of them with the string being written
        (``in_value_string``); the whole value when ``complete``. ``MISSING`` when
        there is none. Only the open containers are copied; ``typed`` takes the
        members converted where their type is known (see the class)."""
        if self._mode == _DONE:
            return self._root_typed if typed else self._root
        child: Any = MISSING
        if level == len(self._plain):
            child = self._partial_string()
            if child is MISSING:
                return MISSING
            level -= 1
        containers = self._typed if typed else self._plain
        closers, keys = self._closers, self._keys
        for at in range(level, -1, -1):
            members = containers[at].copy()
            if child is not MISSING:
                if closers[at] == "]":
                    members.append(child)  # type: ignore[union-attr]
                else:
                    members[keys[at]] = child  # type: ignore[call-overload]
            child = members
        return child
