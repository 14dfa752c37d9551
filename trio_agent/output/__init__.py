"""Typed output: ``output_type=`` asks the model for a value of a type, checks it,
and sends it back with its JSON path when it does not fit; ``partial_output``
reads the answer while it streams, for a UI.

The answer's shape, request and check live in ``_spec``; the partial reader
in ``_partial``, on the JSON-prefix scanner of ``_scan``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy
from .._public import publish as _publish
from ._spec import OutputError as OutputError

if TYPE_CHECKING:
    from ._partial import PartialOutput as PartialOutput
    from ._partial import PartialOutputIterator as PartialOutputIterator
    from ._partial import partial_output as partial_output

__all__ = ["OutputError", "PartialOutput", "PartialOutputIterator", "partial_output"]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)

# The streaming reader is imported when first named.
__getattr__ = _lazy(
    globals(),
    {name: "._partial" for name in ("PartialOutput", "PartialOutputIterator", "partial_output")},
)
