"""A griffe extension for the API reference: reST literal blocks as Markdown.

The docstrings are reST-flavoured: a paragraph ending in ``::`` introduces an
indented example. Markdown would show the ``::`` and read the example as an
unhighlighted block, so each such block becomes a fenced ```python block (the
``::`` becomes ``:``, or goes when it stands alone), as reST would render it.
Nothing else in a docstring changes.
"""

from __future__ import annotations

import re
import textwrap
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
