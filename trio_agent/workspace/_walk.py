"""Directory listings and walks that a cancelled caller does not wait for.

They run in a worker thread that calls a check at every entry (a directory
may be huge, and a stat may hang on a slow file system): past the time limit
the check raises a ``WorkspaceError``; on cancellation the caller returns at
once, and the abandoned thread stops at its next check, closing the
descriptors it opened on the way out. Symlinks are listed, never followed.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar, final

import trio

from ._errors import WorkspaceError
from ._paths import explain, open_parts, shown

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
                lines.append(shown(name) + mark)
    finally:
        os.close(fd)
    return lines, len(names)


def walk(
    root_fd: int, parts: Sequence[str], max_path_chars: int, check: Check
) -> Generator[tuple[str, int], None, None]:
    """(relative path, mode) of everything below ``parts``, depth first in name
    order, symlinks not followed, ``check()`` per entry. At most ``_HELD`` levels
    hold a descriptor (a tree may be 512 levels deep): a deeper walk drops the
    shallower ones' and opens one again from the root when it gets back to it
    (component by component, never through a symlink; a directory replaced
    meanwhile is not walked further). All are closed when the walk ends or is
    closed. A directory whose path is already ``max_path_chars`` long is listed,
    not entered (no tool could use what is below it)."""
    levels: list[_Level] = []
    try:
        top = open_parts(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY)
        try:
            levels.append(_Level(top, "/".join(parts), os.fstat(top)))
        except OSError:
            os.close(top)
            raise
        while True:
            level = levels[-1]
            assert level.fd is not None  # the deepest level is always held
            for name in _names(level.fd, check):
                check()
                mode = _mode(name, level.fd)
                if mode is None:
                    continue
                path = f"{level.rel}/{name}" if level.rel else name
                yield path, mode
                if stat.S_ISDIR(mode) and len(path) < max_path_chars:
                    level.left.append(name)
            level.left.reverse()  # popped from the end: in name order
            if not _descend(root_fd, levels):
                return
    finally:
        for level in levels:
            level.close()


_HELD = 16
"""Levels of a walk that hold a descriptor at once."""
_NO_DESCRIPTOR = (errno.EMFILE, errno.ENFILE)


@final
class _Level:
    """One directory of a walk: its descriptor (None when dropped), its path from
    the root, its identity (to know it again), and its subdirectories left."""

    __slots__ = ("fd", "identity", "left", "rel")

    def __init__(self, fd: int, rel: str, info: os.stat_result) -> None:
        self.fd: int | None = fd
        self.rel = rel
        self.identity = (info.st_dev, info.st_ino)
        self.left: list[str] = []

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def reopen(self, root_fd: int) -> bool:
        """Hold a descriptor again (opened from the root); False if the directory
        is no longer there, or is another one."""
        try:
            fd = open_parts(root_fd, self.rel.split("/") if self.rel else [], os.O_RDONLY)
        except OSError as exc:
            if exc.errno in _NO_DESCRIPTOR:
                raise
            return False
        except WorkspaceError:
            return False
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != self.identity or not stat.S_ISDIR(info.st_mode):
            os.close(fd)
            return False
        self.fd = fd
        return True


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


def _descend(root_fd: int, levels: list[_Level]) -> bool:
    """Open and push the next directory of a depth-first walk, closing the levels
    that are done and dropping the descriptors of those more than ``_HELD`` up;
    False when the walk is over."""
    while levels:
        level = levels[-1]
        if not level.left or (level.fd is None and not level.reopen(root_fd)):
            levels.pop()
            level.close()
            continue
        assert level.fd is not None
        name = level.left.pop()
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=level.fd)
        except OSError as exc:  # gone, or replaced (by a symlink too) since it was listed
            if exc.errno in _NO_DESCRIPTOR:  # never a directory silently skipped
                raise
            continue
        try:
            info = os.fstat(child)
        except OSError:
            os.close(child)
            raise
        levels.append(_Level(child, f"{level.rel}/{name}" if level.rel else name, info))
        if len(levels) > _HELD:
            levels[-_HELD - 1].close()
        return True
    return False
