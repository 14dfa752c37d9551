"""One writer per session: an exclusive flock held while a writer is open.

The JSONL store locks the session's ledger file itself; the SQLite store a
lock file per session beside its database. flock belongs to the open file,
so a second writer is refused in the same process as in another one, and the
kernel drops the lock the moment its holder dies, kill -9 included: a crashed
writer never leaves a session locked. Who holds a lock is read from
``/proc/locks`` (Linux): exact from the moment the lock is taken, and
looking never takes it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import weakref
from pathlib import Path
from typing import final

from ..ledger._records import LedgerError, SessionLockedError

__all__ = ["WriterLock", "holder_of"]


@final
class WriterLock:
    """A held writer lock; ``release()`` (or the process ending) lets it go.

    A lock on a file of its own (``acquire``) closes it when released or
    dropped. A lock on the caller's file (``on``) is let go by ``release()``,
    which must come before the caller closes that file, or by the close.
    """

    __slots__ = ("__weakref__", "_close", "_fd", "held", "path")

    def __init__(self, fd: int, path: Path, owned: bool) -> None:
        self.path = path
        self.held = True
        self._fd = fd
        self._close = weakref.finalize(self, os.close, fd) if owned else None

    @classmethod
    def on(cls, fd: int, path: Path, session_id: str) -> WriterLock:
        """Lock the open file ``fd`` (``path``), which stays the caller's to close.

        Raises ``SessionLockedError`` naming the holder when another writer
        has it, ``LedgerError`` when it cannot be locked.
        """
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SessionLockedError(
                f"session {session_id!r} already has a writer: {_describe_holder(fd)} holds {path}"
            ) from None
        except OSError as exc:
            raise LedgerError(f"session {session_id!r}: cannot lock {path}: {exc}") from exc
        return cls(fd, path, owned=False)

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> WriterLock:
        """Lock the lock file ``path`` (created if missing), kept open while held."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LedgerError(
                f"session {session_id!r}: cannot open its lock file {path}: {exc}"
            ) from exc
        try:
            cls.on(fd, path, session_id)
        except LedgerError:
            os.close(fd)
            raise
        return cls(fd, path, owned=True)

    def release(self) -> None:
        """Let the lock go; idempotent."""
        if not self.held:
            return
        self.held = False
        try:  # explicitly: a child forked meanwhile shares the open file, and its lock
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError:
            pass  # nothing else to do: closing the file lets it go
        if self._close is not None:
            self._close()


def _locker(info: os.stat_result) -> int | None:
    """The pid holding an flock on the file ``info`` describes, from ``/proc/locks``."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; "->" marks a waiter
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == where:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None


def _describe_holder(fd: int) -> str:
    try:
        pid = _locker(os.fstat(fd))
    except OSError:
        pid = None
    if pid is None:  # not Linux, or it let go meanwhile
        return "another writer"
    if pid == os.getpid():
        return "this process"
    return f"process {pid} on {socket.gethostname()}"


def holder_of(path: Path) -> str | None:
    """Who holds the lock on ``path`` now, or None when nobody does (for ``show``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return None if _locker(os.fstat(fd)) is None else _describe_holder(fd)
    finally:
        os.close(fd)
