"""Sessions as JSONL files: one ``{session_id}.jsonl`` per session, one record a line.

Each line is written to the OS inline, on the trio thread (about a
microsecond); fsyncs run in the shared pool of ``_fsync`` and cover every
line written before them (group commit). The session's writer holds an
flock on ``{session_id}.jsonl.lock`` beside it for as long as it is open.
"""

from __future__ import annotations

import errno
import os
import weakref
from pathlib import Path
from typing import final

import trio

from ..ledger import LedgerError, SessionChangedError, SessionWriter
from ._base import LoadedSession, WriterState, check_session_id, parse_jsonl
from ._fsync import FsyncClosedError, SyncedFile
from ._lock import WriterLock

__all__ = ["JsonlStore"]


@final
class _JsonlWriter:
    """Appends whole lines to the session file: a write that fails is undone (the
    file is cut back to its last whole line) and breaks the writer."""

    __slots__ = ("__weakref__", "_close_fd", "_fd", "_path", "_size", "_state", "_sync")

    def __init__(self, fd: int, path: Path, size: int, state: WriterState) -> None:
        self._fd = fd
        self._path = path
        self._size = size  # where the last whole line ends
        self._state = state
        self._sync = SyncedFile(fd)
        self._close_fd = weakref.finalize(self, os.close, fd)  # once, however it ends

    def append(self, line: bytes) -> None:
        if not self._state.usable:
            self._state.check()
        view = memoryview(line)
        try:
            while view:
                written = os.write(self._fd, view)
                if written <= 0:  # no progress and no error: treat as a full disk
                    raise OSError(errno.ENOSPC, "the write made no progress")
                view = view[written:]
        except OSError as exc:
            self._undo()
            raise self._state.fail(
                LedgerError(f"cannot write the ledger of {self._state.session_id!r}: {exc}")
            ) from exc
        self._size += len(line)
        self._sync.written += 1

    def _undo(self) -> None:
        """Cut the file back to its last whole line. If even that fails, the torn
        tail is cut when the session is next reopened (load ignores it)."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            pass

    def commit(self) -> None:
        """Nothing to do: every line is already with the OS."""
        self._state.check()

    async def flush(self, durable: bool) -> None:
        if not durable:
            return
        if not self._state.usable:
            self._state.check()
        try:
            await self._sync.sync()
        except OSError as exc:
            raise self._state.fail(LedgerError(f"fsync failed: {exc}")) from exc
        except FsyncClosedError:
            self._state.check()

    async def aclose(self) -> None:
        """Close the file and let the session's lock go (once). Waits for an fsync in
        flight, in a worker thread; cancellation waits for it too."""
        if self._state.closed:
            return
        await trio.to_thread.run_sync(self._sync.close)
        self._close_fd()
        self._state.close()

    @property
    def fsyncs(self) -> int:
        return self._sync.fsyncs


@final
class JsonlStore:
    """One ``{session_id}.jsonl`` file per session in ``directory``, one record a line.

    A writer holds an flock on ``{session_id}.jsonl.lock`` (released by the
    kernel if the process dies), so a session has one writer at a time, in
    this process or any other on the machine.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, session_id: str) -> Path:
        return self.directory / f"{check_session_id(session_id)}.jsonl"

    def lock_path(self, session_id: str) -> Path:
        return self.directory / f"{check_session_id(session_id)}.jsonl.lock"

    def create(self, session_id: str) -> SessionWriter:
        path = self.path(session_id)
        lock = WriterLock.acquire(self.lock_path(session_id), session_id)
        made = False
        try:
            fd = self._create_file(path, session_id)
            writer = _JsonlWriter(fd, path, 0, WriterState(session_id, lock))
            made = True
        finally:
            if not made:
                lock.release()
        return writer

    def _create_file(self, path: Path, session_id: str) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            try:
                return os.open(path, flags | os.O_EXCL, 0o644)
            except FileExistsError:
                # A session whose first line was never finished (the process died
                # while creating it) holds no record: it may be created again.
                if b"\n" in path.read_bytes():
                    raise LedgerError(f"session {session_id!r} already exists at {path}") from None
                return os.open(path, flags | os.O_TRUNC)
        except OSError as exc:
            raise LedgerError(f"cannot create session {session_id!r} at {path}: {exc}") from exc

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        session_id = loaded.session_id
        path = self.path(session_id)
        lock = WriterLock.acquire(self.lock_path(session_id), session_id)
        fd, made = -1, False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            size = os.fstat(fd).st_size
            if loaded.size >= 0 and size != loaded.size:
                raise SessionChangedError(
                    f"session {session_id!r} at {path} has {size} bytes, not the "
                    f"{loaded.size} it had when loaded: another writer appended; load it again"
                )
            if size != loaded.valid_bytes:
                os.ftruncate(fd, loaded.valid_bytes)  # drop the torn tail before appending
            writer = _JsonlWriter(fd, path, loaded.valid_bytes, WriterState(session_id, lock))
            made = True
        except OSError as exc:
            raise LedgerError(f"cannot reopen session {session_id!r} at {path}: {exc}") from exc
        finally:
            if not made:
                if fd != -1:
                    os.close(fd)
                lock.release()
        return writer

    async def load(self, session_id: str) -> LoadedSession:
        """The session's records (a torn last line ignored and reported). Any failure
        to read is a ``LedgerError`` naming the session and the file."""
        path = self.path(session_id)
        try:
            data = await trio.Path(path).read_bytes()
        except FileNotFoundError:
            raise LedgerError(f"no session {session_id!r} at {path}") from None
        except OSError as exc:
            raise LedgerError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        return parse_jsonl(session_id, data)
