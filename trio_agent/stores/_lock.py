"""One writer per session: an exclusive lock on a file beside the session.

``WriterLock.acquire`` takes ``flock(LOCK_EX | LOCK_NB)`` on a lock file and
writes who holds it there. flock belongs to the open file, so a second
writer is refused in the same process as in another one, and the kernel
drops the lock the moment its holder dies, kill -9 included: a crashed
writer never leaves a session locked. The lock file itself stays (removing
it would race with the next writer opening it); it is a few bytes.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
import weakref
from pathlib import Path
from typing import final

import msgspec

from ..ledger import LedgerError, SessionLockedError

__all__ = ["WriterLock", "holder_of"]


class _Holder(msgspec.Struct, frozen=True):
    pid: int
    host: str
    since: str


@final
class WriterLock:
    """A held writer lock; ``release()`` (or the process ending) lets it go."""

    __slots__ = ("__weakref__", "_release", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.path = path
        # closed once, by release() or when the lock is dropped unreleased
        self._release = weakref.finalize(self, os.close, fd)

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> WriterLock:
        """Lock ``path`` (created if missing) for the writer of ``session_id``.

        Raises ``SessionLockedError`` naming the holder when another writer
        has it, ``LedgerError`` when the lock file cannot be opened.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LedgerError(
                f"session {session_id!r}: cannot open its lock file {path}: {exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise SessionLockedError(
                f"session {session_id!r} already has a writer: {holder} holds {path}"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise LedgerError(f"session {session_id!r}: cannot lock {path}: {exc}") from exc
        since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        holder = msgspec.json.encode(_Holder(os.getpid(), socket.gethostname(), since))
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder + b"\n", 0)
        except OSError:
            pass  # who holds it is only for error messages; the lock is what counts
        return cls(fd, path)

    def release(self) -> None:
        """Let the lock go (closing the file releases the flock); idempotent."""
        self._release()

    @property
    def held(self) -> bool:
        return self._release.alive


def _describe_holder(fd: int) -> str:
    """Who holds the lock, as its file says (best effort: it may not have said yet)."""
    try:
        holder = msgspec.json.decode(os.pread(fd, 1024, 0).strip(), type=_Holder)
    except (OSError, msgspec.DecodeError):
        return "another writer"
    mine = holder.pid == os.getpid() and holder.host == socket.gethostname()
    where = "this process" if mine else f"process {holder.pid} on {holder.host}"
    return f"{where} (since {holder.since})"


def holder_of(path: Path) -> str | None:
    """Who holds the lock at ``path`` now, or None when nobody does (for ``show``).

    Read from ``/proc/locks`` (Linux), so looking never takes the lock, not
    even for a moment: a writer starting meanwhile is never refused for it.
    """
    try:
        info = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if "FLOCK" in fields and where in fields and "->" not in fields:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return "another writer"
            try:
                return _describe_holder(fd)
            finally:
                os.close(fd)
    return None
