"""Directory listings and walks that a cancelled caller does not wait for.

They run in a worker thread that calls a check at every entry (a directory
may be huge, and a stat may hang on a slow file system): past the time limit
the check raises a ``WorkspaceError``; on cancellation the caller returns at
once, and the abandoned thread stops at its next check, closing the
descriptors it opened on the way out. Symlinks are listed, never followed.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar

import trio

from ._errors import WorkspaceError
from ._paths import explain, open_parts

__all__ = ["Check", "abandonable", "list_entries", "walk"]

T = TypeVar("T")

Check = Callable[[], None]
"""Called by a worker thread per entry; raises to stop the work."""


async def abandonable(path: str, what: str, seconds: float, work: Callable[[Check], T]) -> T:
    """``work(check)`` in a worker thread that calls ``check()`` per entry; past
    ``seconds``, ``check()`` raises a ``WorkspaceError`` naming ``what``.

    Cancellation raises at once: the thread is abandoned, and its next
    ``check()`` raises ``trio.Cancelled`` there, so it ends soon, closing its
    own descriptors on the way out. ``work`` must return plain data
    (nothing to release): an abandoned thread's result is dropped.
    """
    deadline = time.monotonic() + seconds

    def check() -> None:
        trio.from_thread.check_cancelled()
        if time.monotonic() > deadline:
            raise WorkspaceError(f"{what} took longer than {seconds} s")

    try:
        return await trio.to_thread.run_sync(work, check, abandon_on_cancel=True)
    except OSError as exc:
        raise explain(path, exc) from None


def list_entries(
    root_fd: int, parts: Sequence[str], limit: int, check: Check
) -> tuple[list[str], int]:
    """The first ``limit`` entries of a directory (``/`` after directories, ``@``
    after symlinks), in name order, and how many entries it has."""
    fd = open_parts(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = _names(fd, check)
        lines = []
        for name in names[:limit]:
            check()
            mode = _mode(name, fd)
            if mode is not None:  # None: gone since it was listed
                mark = "/" if stat.S_ISDIR(mode) else "@" if stat.S_ISLNK(mode) else ""
                lines.append(name + mark)
    finally:
        os.close(fd)
    return lines, len(names)


def walk(
    root_fd: int, parts: Sequence[str], max_path_chars: int, check: Check
) -> Generator[tuple[str, int], None, None]:
    """(relative path, mode) of everything below ``parts``, depth first in name
    order, symlinks not followed, ``check()`` per entry. One descriptor per open
    level, all closed when the walk ends or is closed; a directory whose path is
    already ``max_path_chars`` long is listed, not entered (no tool could use
    what is below it)."""
    levels: list[tuple[int, str, list[str]]] = []  # (fd, path, subdirectories left)
    try:
        levels.append(
            (open_parts(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY), "/".join(parts), [])
        )
        while True:
            fd, rel, subdirs = levels[-1]
            for name in _names(fd, check):
                check()
                mode = _mode(name, fd)
                if mode is None:
                    continue
                path = f"{rel}/{name}" if rel else name
                yield path, mode
                if stat.S_ISDIR(mode) and len(path) < max_path_chars:
                    subdirs.append(name)
            subdirs.reverse()  # popped from the end: in name order
            if not _descend(levels):
                return
    finally:
        for fd, _, _ in levels:
            os.close(fd)


def _names(dir_fd: int, check: Check) -> list[str]:
    """The names in a directory, sorted; ``check()`` per entry (a directory may be huge)."""
    names = []
    with os.scandir(dir_fd) as entries:  # scans a duplicate of the descriptor
        for entry in entries:
            check()
            names.append(entry.name)
    names.sort()
    return names


def _mode(name: str, dir_fd: int) -> int | None:
    """The mode of ``name`` in a directory (a symlink's own), or None if it is gone."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def _descend(levels: list[tuple[int, str, list[str]]]) -> bool:
    """Open and push the next directory of a depth-first walk, closing the levels
    that are done; False when the walk is over."""
    while levels:
        fd, rel, left = levels[-1]
        if not left:
            levels.pop()
            os.close(fd)
            continue
        name = left.pop()
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:  # gone, or replaced (by a symlink too) since it was listed
            continue
        levels.append((child, f"{rel}/{name}" if rel else name, []))
        return True
    return False
