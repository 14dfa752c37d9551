"""Paths under the workspace root, opened without ever following a symlink.

A path becomes its components below the root (``..``, NUL characters, overlong
paths and absolute paths outside the root are refused). The components are
opened one at a time from the root's held directory descriptor with
``O_NOFOLLOW``, so there is no window between a check and the open, and only
regular files and directories come back. An ``OSError`` becomes a
``WorkspaceError`` whose message the model can act on.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import trio

from ._errors import WorkspaceError

__all__ = ["explain", "in_thread", "open_parts", "path_parts", "regular", "shown"]

T = TypeVar("T")
_NUL = "\x00"
_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters a name cannot show as it is in a listing of one name a line: control
characters and line separators."""
_QUOTED = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029"\\\\]')
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def path_parts(path: object, root: Path, max_chars: int) -> list[str]:
    """The path's components below ``root``, or a ``WorkspaceError`` saying why not."""
    if type(path) is not str:
        raise WorkspaceError(f"path must be a string, got {type(path).__name__}")
    if len(path) > max_chars:
        raise WorkspaceError(f"path is longer than {max_chars} characters")
    if _NUL in path:
        raise WorkspaceError("path contains a NUL character")
    if os.path.isabs(path):
        top = str(root)
        if path != top and not path.startswith(top + os.sep):
            raise WorkspaceError(f"{path!r} is outside the workspace")
        path = path[len(top) :].lstrip(os.sep)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise WorkspaceError(f"{path!r} uses '..'; paths stay inside the workspace")
    return parts


def shown(name: str) -> str:
    r"""A name (or path) as a listing of one name a line shows it: as it is, or,
    when a control character or line separator in it would make it read as
    other names (``a\nb`` as ``a`` and ``b``), or it starts with a quote (and
    would read as this form), as a JSON string in quotes (``"a\nb"``), whose
    value is the path the model sends back."""
    if not name.startswith('"') and _BREAKING.search(name) is None:
        return name
    return '"' + _QUOTED.sub(_escape, name) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def open_parts(root_fd: int, parts: Sequence[str], flags: int, *, create_dirs: bool = False) -> int:
    """Open ``parts`` under the root's descriptor, never following a symlink on the way."""
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        if not parts:
            return fd
        # O_NONBLOCK: opening a FIFO or a device must never block; only regular
        # files and directories are used, checked with fstat before any I/O.
        last = os.open(
            parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, 0o644, dir_fd=fd
        )
        info = os.fstat(last)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            os.close(last)
            raise WorkspaceError(f"{'/'.join(parts)!r} is not a regular file or directory")
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            os.close(last)
            raise WorkspaceError(
                f"{'/'.join(parts)!r} has other hard links (it may be a file outside)"
            )
        os.set_blocking(last, True)
        return last
    finally:
        if parts:
            os.close(fd)


def regular(fd: int, path: str) -> os.stat_result:
    """The ``fstat`` of ``fd``, or a ``WorkspaceError`` if it is not a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(f"{path!r} is not a regular file")
    return info


def explain(path: str, exc: OSError) -> WorkspaceError:
    """A ``WorkspaceError`` saying in words why ``path`` failed with ``exc``."""
    reasons = {
        errno.ELOOP: "is a symlink (symlinks are not followed)",
        errno.ENOTDIR: "goes through something that is not a directory, or a symlink",
        errno.ENOENT: "does not exist",
        errno.EISDIR: "is a directory",
        errno.EACCES: "is not accessible",
        errno.EEXIST: "already exists",
    }
    reason = None if exc.errno is None else reasons.get(exc.errno)
    return WorkspaceError(f"{path!r} {reason or exc.strerror or str(exc)}")


async def in_thread(path: str, work: Callable[[], T]) -> T:
    """``work()`` in a worker thread; an ``OSError`` becomes ``explain(path, exc)``."""
    try:
        return await trio.to_thread.run_sync(work)
    except OSError as exc:
        raise explain(path, exc) from None
