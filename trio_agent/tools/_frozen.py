"""Read-only JSON containers, for data built once and shared by every run.

A tool's spec is made once per tool and handed to every request of every
run that uses the tool. Its schema is plain JSON in read-only containers:
they compare and encode (msgspec, ``json``) as ``dict`` and ``list`` do, a
copy of them (``copy``, ``deepcopy``, pickle) is a plain, changeable one,
and any change in place raises ``TypeError``: a model adapter that edits a
schema it was given fails loudly instead of changing what every other run
sends.
"""

from __future__ import annotations

from typing import Any, NoReturn, final

_HOW = "a tool's schema is shared by every request; copy it to change it"


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"this {type(self).__name__} is read-only: {_HOW}")


@final
class ReadOnlyDict(dict[Any, Any]):
    """A ``dict`` that refuses every change in place."""

    __slots__ = ()
    __init__ = __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:  # a copy (copy, deepcopy, pickle) is yours
        return (dict, (dict(self),))


@final
class ReadOnlyList(list[Any]):
    """A ``list`` that refuses every change in place."""

    __slots__ = ()
    __init__ = __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def frozen_json(value: Any) -> Any:
    """A read-only copy of plain JSON (dicts and lists all the way down)."""
    if type(value) in (dict, ReadOnlyDict):
        frozen = ReadOnlyDict.__new__(ReadOnlyDict)  # filled here: __init__ refuses
        dict.update(frozen, {key: frozen_json(item) for key, item in value.items()})
        return frozen
    if type(value) in (list, ReadOnlyList):
        items = ReadOnlyList.__new__(ReadOnlyList)
        list.extend(items, [frozen_json(item) for item in value])
        return items
    return value


def is_json_object(value: object) -> bool:
    """A dict, read-only or not (what a schema may be)."""
    return type(value) in (dict, ReadOnlyDict)
