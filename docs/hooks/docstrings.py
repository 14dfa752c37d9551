"""Griffe extensions for the API reference (mkdocs.yml loads them).

- ``RestLiterals``: the docstrings are reST-flavoured, and a paragraph ending
  in ``::`` introduces an indented example. Markdown would show the ``::`` and
  an unhighlighted block, so each such block becomes a fenced ```python block
  (the ``::`` becomes ``:``, or goes when it stands alone), as reST renders it.
- ``MetaDescriptions``: a msgspec field documents itself in its annotation,
  ``Annotated[T, Meta(description="...")]`` (so that the JSON Schema carries
  it); the reference shows that description as the field's docstring and the
  annotation as plain ``T``. A ``Meta`` kept in a module constant is read there.

Nothing else changes, and nothing is imported: griffe reads the source.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from typing import Any

import griffe

# "text::" (or "::" alone), a blank line, then lines indented more than the text
LITERAL = re.compile(r"(?m)^(?P<lead>[^\n]*?)::\n\n(?P<body>(?:(?:[ \t]+[^\n]*)?\n)+?)(?=\S|\Z)")


def markdown(docstring: str) -> str:
    """``docstring`` with each reST literal block fenced as Python."""

    def fence(match: re.Match[str]) -> str:
        lead = match.group("lead")
        body = textwrap.dedent(match.group("body")).strip("\n")
        intro = f"{lead}:\n\n" if lead.strip() else ""
        return f"{intro}```python\n{body}\n```\n\n"

    return LITERAL.sub(fence, docstring + "\n").rstrip("\n")


class RestLiterals(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and "::\n" in obj.docstring.value:
            obj.docstring.value = markdown(obj.docstring.value)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    for member in obj.members.values():
        if isinstance(member, griffe.Alias):
            continue  # documented where it is defined
        yield member
        if isinstance(member, griffe.Module | griffe.Class):
            yield from _objects(member)


def _description(meta: object, module: griffe.Object) -> str | None:
    """The ``description=`` of a ``Meta(...)`` call, or of the module constant
    named ``meta`` that holds one; None if there is none."""
    if isinstance(meta, griffe.ExprName):
        held = module.members.get(meta.name)
        meta = getattr(held, "value", None) if isinstance(held, griffe.Attribute) else None
    if not (isinstance(meta, griffe.ExprCall) and str(meta.function) in {"Meta", "msgspec.Meta"}):
        return None
    for argument in meta.arguments:
        if isinstance(argument, griffe.ExprKeyword) and argument.name == "description":
            try:
                text = ast.literal_eval(str(argument.value))
            except (ValueError, SyntaxError):
                return None
            return text if isinstance(text, str) else None
    return None


class MetaDescriptions(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            annotation = getattr(obj, "annotation", None)
            if not (
                isinstance(obj, griffe.Attribute)
                and isinstance(annotation, griffe.ExprSubscript)
                and str(annotation.left) in {"Annotated", "typing.Annotated"}
                and isinstance(annotation.slice, griffe.ExprTuple)
            ):
                continue
            kind, *extras = annotation.slice.elements
            for extra in extras:
                text = _description(extra, obj.module)
                if text is None:
                    continue
                obj.annotation = kind
                if obj.docstring is None:
                    obj.docstring = griffe.Docstring(text, parent=obj)
                break
