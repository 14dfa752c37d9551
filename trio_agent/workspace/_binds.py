"""The paths bound into the sandbox, checked before every command and bound by descriptor.

The workspace root, ``ro_paths`` and ``rw_paths`` are resolved once, when the
workspace is made, and pinned: each path, its file type, and where the very
file matters, its device and inode (the root: the directory the file tools
hold; a read-only path inside a writable one: moved away, it would be
writable where it went). Before every command each path is opened again one
component at a time from ``/``, each component with ``O_PATH | O_NOFOLLOW``
relative to its parent's descriptor, and checked against its pin; bubblewrap
then binds that descriptor (``--bind-fd``, ``--ro-bind-fd``), so nothing can
change between the check and the mount. A path that is no longer what it was
(a component now a symlink or not a directory, the path gone, of another
type, another file where the file is pinned) fails closed: ``WorkspaceError``
names the path and why, and the command is not run. Where the very file is
not pinned, a plain directory made again at the same path (``rm -rf``,
``mkdir``) is the same path: still bound.

The destination (the same path) is resolved by bubblewrap inside the new
mount namespace, following symlinks: a bind can only land inside the new
sandbox, never on the host. Below the bind that holds it, its components
are the host's directories just checked, and the ``run`` tool runs one
command at a time, so none of the workspace's commands can change them
before the mount; a symlink swapped in for the last component after the
check makes bubblewrap refuse (it compares the mount with the descriptor).
The limit: a command running at that very moment (two ``Workspace.run``
calls at once, or another workspace's command that can write a directory on
the way) could move an inner directory or swap it for a symlink between the
check and the mount; the checked directory is then bound where the path now
leads, inside that sandbox, and a read-only one moved within a writable one
is writable where it went, for that command.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final, final

import attrs

from ._errors import WorkspaceError

__all__ = ["Bind", "HeldBinds", "open_binds", "pin_binds"]

_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS: Final = {
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
    stat.S_IFLNK: "a symlink",
    stat.S_IFSOCK: "a socket",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@final
@attrs.frozen
class Bind:
    """One path bound into the sandbox, as it was when the workspace was made:
    ``option`` names it in errors (``"the workspace root"``, ``"ro_paths"``,
    ``"rw_paths"``), ``kind`` is its file type (``S_IFMT``), ``identity`` its
    ``(st_dev, st_ino)`` where the very file must still be there (else None)."""

    path: Path
    option: str
    writable: bool
    kind: int
    identity: tuple[int, int] | None = None


def pin_binds(
    root: Path, root_identity: tuple[int, int], ro_paths: Sequence[Path], rw_paths: Sequence[Path]
) -> tuple[Bind, ...]:
    """The binds of a workspace whose root directory is ``root_identity``, parents
    before children (a path bound inside another keeps its own mode). The
    extra paths (resolved, checked by ``checked_paths``) are opened as every run
    will; one that cannot be raises ``ValueError``."""
    binds = [Bind(root, "the workspace root", True, stat.S_IFDIR, root_identity)]
    writable = [root, *rw_paths]
    for option, paths in (("ro_paths", ro_paths), ("rw_paths", rw_paths)):
        for path in paths:
            try:
                fd = _open_components(path)
            except _Changed as exc:
                raise ValueError(f"{option}: {str(path)!r}: {exc.component!r} {exc.why}") from None
            try:
                info = os.fstat(fd)
            finally:
                os.close(fd)
            inside = option == "ro_paths" and any(path.is_relative_to(w) for w in writable)
            identity = (info.st_dev, info.st_ino) if inside else None
            kind = stat.S_IFMT(info.st_mode)
            binds.append(Bind(path, option, option == "rw_paths", kind, identity))
    return tuple(sorted(binds, key=lambda bind: len(bind.path.parts)))


@final
class HeldBinds:
    """The binds of one command, opened and checked: ``argv`` bubblewrap's options
    binding them, ``fds`` the descriptors those name (to pass to it), ``close()``
    once it has started (closing twice is a no-op: a descriptor number is
    never closed after it may have been reused). Without ``by_fd`` (a
    bubblewrap without ``--bind-fd``) the checked paths are bound by path and
    no descriptor is kept: one the command inherited would lead out."""

    def __init__(self, opened: Sequence[tuple[Bind, int]], *, by_fd: bool = True) -> None:
        self.fds = tuple(fd for _, fd in opened)
        self.argv: list[str] = []
        for bind, fd in opened:
            if by_fd:
                how = "--bind-fd" if bind.writable else "--ro-bind-fd"
                self.argv += [how, str(fd), str(bind.path)]
            else:
                how = "--bind" if bind.writable else "--ro-bind"
                self.argv += [how, str(bind.path), str(bind.path)]
        self._open = True
        if not by_fd:
            self.close()
            self.fds = ()

    def close(self) -> None:
        if self._open:
            self._open = False
            for fd in self.fds:
                os.close(fd)


def open_binds(binds: Sequence[Bind], *, by_fd: bool = True) -> HeldBinds:
    """Each bind opened from ``/`` without following a symlink and checked against
    its pin (bound by descriptor, or with ``by_fd=False`` by path); ``WorkspaceError``
    (nothing left open) naming the first that is no longer what it was.
    Blocking: a few system calls per path component."""
    opened: list[tuple[Bind, int]] = []
    done = False
    try:
        for bind in binds:
            try:
                fd = _open_components(bind.path)
                opened.append((bind, fd))
                _check(bind, os.fstat(fd))
            except _Changed as exc:
                raise WorkspaceError(
                    f"{bind.option} {str(bind.path)!r} is no longer what it was when the "
                    f"workspace was made: {exc.component!r} {exc.why}; the command was not "
                    "run, nor will one be until the path is restored"
                ) from None
            except OSError as exc:
                raise WorkspaceError(
                    f"{bind.option} {str(bind.path)!r} cannot be checked ({exc}); "
                    "the command was not run"
                ) from None
        held = HeldBinds(opened, by_fd=by_fd)
        done = True
        return held
    finally:
        if not done:
            for _, fd in opened:
                os.close(fd)


class _Changed(Exception):
    """A bound path is not what it must be: ``component`` (a path) ``why``."""

    def __init__(self, component: str, why: str) -> None:
        super().__init__(component, why)
        self.component = component
        self.why = why


def _open_components(path: Path) -> int:
    """An ``O_PATH`` descriptor of ``path``, opened component by component from
    ``/``, each relative to its parent's descriptor and never through a symlink
    (``_Changed`` saying which component is a symlink, missing or not a directory)."""
    fd = os.open("/", _FLAGS | os.O_DIRECTORY)
    done = False
    try:
        parts = path.parts[1:]
        for depth, part in enumerate(parts, 2):
            component = str(Path(*path.parts[:depth]))
            try:
                child = os.open(part, _FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise _Changed(component, "does not exist") from None
            except OSError as exc:
                raise _Changed(component, f"cannot be opened: {exc.strerror}") from None
            parent, fd = fd, child
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    target = os.readlink(part, dir_fd=parent)[:200]
                    raise _Changed(component, f"is a symlink (to {target!r})")
                if depth <= len(parts) and not stat.S_ISDIR(mode):
                    raise _Changed(component, f"is {_kind(mode)}, not a directory")
            finally:
                os.close(parent)
        done = True
        return fd
    finally:
        if not done:
            os.close(fd)


def _check(bind: Bind, info: os.stat_result) -> None:
    """``_Changed`` if the opened path is of another type, or another file where the
    very file is pinned."""
    if stat.S_IFMT(info.st_mode) != bind.kind:
        why = f"is {_kind(info.st_mode)}, not {_KINDS.get(bind.kind, 'what it was')}"
        raise _Changed(str(bind.path), why)
    if bind.identity is not None and (info.st_dev, info.st_ino) != bind.identity:
        noun = "directory" if bind.kind == stat.S_IFDIR else "file"
        why = f"is another {noun} (the one bound before was moved or replaced)"
        raise _Changed(str(bind.path), why)


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "of another type")
