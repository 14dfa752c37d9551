"""Tools: the ``Tool`` value, the ``@tool`` decorator, ``ToolRegistry`` and
``execute_tool_call``, which turns every recoverable failure into an error
result the model can read and act on.
"""

from __future__ import annotations

from .._public import publish as _publish
from ..limits import REJECTED_ARGUMENTS as REJECTED_ARGUMENTS
from ._context import MAX_PROGRESS_TEXT as MAX_PROGRESS_TEXT
from ._context import PROGRESS_INTERVAL as PROGRESS_INTERVAL
from ._context import ToolContext as ToolContext
from ._context import tool_context as tool_context
from ._execute import execute_tool_call as execute_tool_call
from ._tool import TOOL_EFFECTS as TOOL_EFFECTS
from ._tool import FatalToolError as FatalToolError
from ._tool import Tool as Tool
from ._tool import ToolArgumentsError as ToolArgumentsError
from ._tool import ToolEffect as ToolEffect
from ._tool import ToolError as ToolError
from ._tool import ToolRegistry as ToolRegistry
from ._tool import ToolResult as ToolResult
from ._tool import ToolSource as ToolSource
from ._tool import tool as tool

__all__ = [
    "REJECTED_ARGUMENTS",
    "TOOL_EFFECTS",
    "FatalToolError",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolEffect",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSource",
    "execute_tool_call",
    "tool",
    "tool_context",
    "MAX_PROGRESS_TEXT",
    "PROGRESS_INTERVAL",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
