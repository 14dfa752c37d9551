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


def _locker(info: os.stat_result) -> int | None:
    """The pid holding an flock on the file ``info`` describes, from ``/proc/locks``
    (Linux): exact from the moment the lock is taken, and looking takes no lock."""
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
    """Who holds the lock: its pid from the kernel where it can say (the holder may
    not have written its name yet), with what the holder wrote in the file."""
    try:
        pid = _locker(os.fstat(fd))
        written: _Holder | None = msgspec.json.decode(os.pread(fd, 1024, 0).strip(), type=_Holder)
    except (OSError, msgspec.DecodeError):
        written = None
    host = socket.gethostname()
    if pid is None:  # not Linux: the file alone
        if written is None:
            return "another writer"
        pid, host = written.pid, written.host
    since = f" (since {written.since})" if written is not None and written.pid == pid else ""
    if pid == os.getpid() and host == socket.gethostname():
        return f"this process{since}"
    return f"process {pid} on {host}{since}"


def holder_of(path: Path) -> str | None:
    """Who holds the lock at ``path`` now, or None when nobody does (for ``show``).
    Looking never takes the lock, so a writer starting meanwhile is never refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return None if _locker(os.fstat(fd)) is None else _describe_holder(fd)
    finally:
        os.close(fd)
