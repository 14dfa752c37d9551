"""The one error of the workspace tools, kept apart so that every part can raise it.

Each module of the package refuses or fails with ``WorkspaceError`` (a
``ToolError``: the model sees its message). It sits below all of them, so no
module imports another just for the error.
"""

from __future__ import annotations

from ..tools._tool import ToolError

__all__ = ["WorkspaceError"]


class WorkspaceError(ToolError):
    """A refused or failed workspace operation; the model sees the reason."""
