"""Public names carry their public module, as trio's do: ``publish(namespace)`` at
the end of a package page sets the ``__module__`` of each class and function it
exports that a private module defines, so tracebacks, reprs and pickles name the
module a user imports it from (``trio_agent.mcp.MCPServerError``, not
``trio_agent.mcp._session.MCPServerError``).

A name keeps the first public module that claims it: a package page imports its
subpackages' pages before it publishes, so the nearest page wins. A class whose
annotations are strings (``from __future__ import annotations``) has them
evaluated first, in the module that wrote them: msgspec and ``typing`` read
them in ``sys.modules[cls.__module__]``, where the page lacks their names. A
msgspec Struct whose annotations cannot be evaluated keeps its module (a test
lists it); another class keeps its strings (names imported for type checkers
only, which ``typing.get_type_hints`` could not find before either).

A page may load some of its names on first use (``lazy``): a program pays for
a store's driver, or for a part it never uses, only when it touches it.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable, Mapping, MutableMapping

__all__ = ["lazy", "publish"]


def _private(module: str) -> bool:
    """Whether ``module`` is one of ours that users do not import from."""
    parts = module.split(".")
    return parts[0] == "trio_agent" and any(part.startswith("_") for part in parts[1:])


def _settle_annotations(cls: type) -> bool:
    """Evaluate ``cls``'s own string annotations where they were written (its module
    not changed yet); False if one cannot be evaluated there."""
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(value, str) for value in own.values()):
        return True
    try:  # still in ``module``: each class of its MRO is read in its own module
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return False
    cls.__annotations__ = {name: hints[name] for name in own}
    return True


def publish(namespace: Mapping[str, object]) -> None:
    """Give each class and function in ``namespace["__all__"]`` that a private module
    defines, under the name it is exported by, ``namespace["__name__"]`` as its module
    (a name the page loads on first use is published then)."""
    page = typing.cast(str, namespace["__name__"])
    for name in typing.cast("list[str]", namespace["__all__"]):
        if name not in namespace:
            continue  # loaded on first use (``lazy``), published then
        value = namespace[name]
        if not (isinstance(value, type) or inspect.isfunction(value)):
            continue
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or not _private(module):
            continue  # public already (claimed by a nearer page), or not ours
        if getattr(value, "__qualname__", None) != name:
            continue  # exported under another name: a pickle could not find it here
        if isinstance(value, type) and not _settle_annotations(value) and _is_struct(value):
            continue  # msgspec could not read its fields any more
        value.__module__ = page


def _is_struct(cls: type) -> bool:
    """A msgspec Struct: it reads its annotations when first encoded or decoded."""
    return hasattr(cls, "__struct_fields__")


def lazy(
    namespace: MutableMapping[str, object], names: Mapping[str, str]
) -> Callable[[str], object]:
    """A page's ``__getattr__`` (PEP 562) for ``names``, each mapped to the module,
    relative to the page, that defines it: the module is imported the first time
    the name is asked for, the name published as the page's and kept as a plain
    attribute. Other names raise ``AttributeError`` as a module's do."""
    page = typing.cast(str, namespace["__name__"])

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {page!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, page), name)
        publish({"__name__": page, "__all__": [name], name: value})
        namespace[name] = value
        return value

    return __getattr__
