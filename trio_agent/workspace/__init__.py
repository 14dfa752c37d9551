"""Workspace tools: files and processes confined to one root directory.

Every path is opened one component at a time from the root's directory
descriptor with ``O_NOFOLLOW``: ``..``, absolute paths outside the root,
symlinks (also ones a command created) and anything but regular files and
directories are refused, with no window between a check and the open.
Reads, writes, output and time are bounded. File work runs in a worker
thread; commands run in a session of their own, and cancellation or a time
limit ends the whole process group (SIGTERM, a grace period, SIGKILL), which
is reaped before the result is recorded. Long work is visible: ``run``
reports its command's output lines as they come, and ``read_file``, ``glob``
and ``grep`` report how far they got, as ``tool.updated`` events.
"""

from .._public import publish as _publish
from ._errors import WorkspaceError as WorkspaceError
from ._workspace import Workspace as Workspace

__all__ = ["Workspace", "WorkspaceError"]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
