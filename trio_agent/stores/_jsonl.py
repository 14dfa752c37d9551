"""Sessions as JSONL files: one ``{session_id}.jsonl`` per session, one record a line.

Each line is written to the OS inline, on the trio thread (about a
microsecond; a new session's first lines at its ``commit``, in one write, so
it is created whole or not at all); fsyncs run in the shared pool of ``_fsync`` and cover every
line written before them (group commit). The session's writer holds an
flock on the ledger file itself for as long as it is open.
"""

from __future__ import annotations

import errno
import os
import weakref
from pathlib import Path
from typing import Final, final

import trio

from ..ledger._ledger import DEFAULT_SNAPSHOTS, SessionWriter, SnapshotPolicy, check_snapshots
from ..ledger._records import (
    LedgerError,
    SessionChangedError,
    SessionNotFoundError,
    session_exists,
)
from ._base import SNAPSHOT_LINE, LoadedSession, WriterState, check_session_id, parse_jsonl
from ._fsync import FsyncClosedError, SyncedFile
from ._lock import WriterLock

__all__ = ["JsonlStore"]


@final
class _JsonlWriter:
    """Appends whole lines to the session file: a write that fails is undone (the
    file is cut back to its last whole line) and breaks the writer. A new
    session's lines (``new``) are kept until its ``commit`` writes them at once,
    so a session is created whole or not at all: a failed write leaves the file
    empty, a session that can be created again."""

    __slots__ = (
        "__weakref__",
        "_close_fd",
        "_fd",
        "_new",
        "_path",
        "_state",
        "_sync",
        "snapshots",
    )

    def __init__(
        self,
        fd: int,
        path: Path,
        state: WriterState,
        snapshots: SnapshotPolicy | None,
        new: bool = False,
    ) -> None:
        self.snapshots = snapshots  # the ledger writes snapshots by it
        self._fd = fd
        self._path = path
        self._state = state
        self._sync = SyncedFile(fd)
        self._close_fd = weakref.finalize(self, os.close, fd)  # once, however it ends
        self._new: list[bytes] | None = [] if new else None  # until the first commit

    def append(self, line: bytes) -> None:
        if not self._state.usable:
            self._state.check()
        if self._new is not None:
            self._new.append(line)
            return
        self._write(line, 1)

    def _write(self, data: bytes, lines: int) -> None:
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                self._write_rest(memoryview(data)[written:], written)
        except OSError as exc:
            raise self._state.fail(
                LedgerError(f"cannot write the ledger of {self._state.session_id!r}: {exc}")
            ) from exc
        self._sync.written += lines

    def _write_rest(self, rest: memoryview, done: int) -> None:
        """The rest of a line after a short write; on failure the part written is
        cut off again (this writer is the only one: the line is at the end)."""
        try:
            while rest:
                written = os.write(self._fd, rest)
                if written <= 0:  # no progress and no error: treat it as a full disk
                    raise OSError(errno.ENOSPC, "the write made no progress")
                rest, done = rest[written:], done + written
        except OSError:
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - done)
            except OSError:
                pass  # the torn tail is cut when the session is next reopened
            raise

    def commit(self) -> None:
        """A new session's lines, in one write; after that, nothing to do: every line
        is already with the OS."""
        self._state.check()
        lines, self._new = self._new, None
        if lines:
            self._write(b"".join(lines), len(lines))

    async def flush(self, durable: bool) -> None:
        if self._new is not None:
            self.commit()
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
        self._state.close()  # the lock first: it is on this very file
        self._close_fd()

    @property
    def fsyncs(self) -> int:
        return self._sync.fsyncs


@final
class JsonlStore:
    """One ``{session_id}.jsonl`` file per session in ``directory``, one record a line.

    ``directory`` need not exist: it is made (with its parents) when the first
    session is created in it.

    A writer holds an flock on the session's file (released by the kernel if
    the process dies), so a session has one writer at a time, in this process
    or any other on the machine.

    ``snapshots``: when a session's ledger writes a ``snapshot`` record (the
    state its records derive to, at a turn's end), so that a resume reads the
    file from the last one (``load_tail``) instead of whole; None: never.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        snapshots: SnapshotPolicy | None = DEFAULT_SNAPSHOTS,
    ) -> None:
        self.directory = Path(directory)
        self.snapshots = check_snapshots(snapshots)

    def path(self, session_id: str) -> Path:
        return self.directory / f"{check_session_id(session_id)}.jsonl"

    def create(self, session_id: str) -> SessionWriter:
        """A writer for a new session, holding its lock (blocking file work: the
        ``Agent`` calls it in a worker thread). The directory is made, with its
        parents, if it does not exist yet. ``SessionExistsError`` if the session
        exists, ``SessionLockedError`` if another writer holds it."""
        path = self.path(session_id)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        fd, made = -1, False
        try:
            try:
                fd = self._open_new(path, flags | os.O_CREAT | os.O_EXCL)
                lock = WriterLock.on(fd, path, session_id)
            except FileExistsError:
                fd = os.open(path, flags)
                lock = WriterLock.on(fd, path, session_id)  # then look: nobody writes now
                # A session whose first line was never finished (its process died while
                # creating it) holds no record: it may be created again.
                if b"\n" in path.read_bytes():
                    lock.release()
                    raise session_exists(session_id, self.directory) from None
                os.ftruncate(fd, 0)
            writer = _JsonlWriter(fd, path, WriterState(session_id, lock), self.snapshots, True)
            made = True
        except OSError as exc:
            raise LedgerError(f"cannot create session {session_id!r} at {path}: {exc}") from exc
        finally:
            if not made and fd != -1:
                os.close(fd)  # and with it any lock taken on it
        return writer

    def _open_new(self, path: Path, flags: int) -> int:
        """Open (create) ``path``; the store's directory is made on first use."""
        try:
            return os.open(path, flags, 0o644)
        except FileNotFoundError:
            if self.directory.is_dir():
                raise
        self.directory.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        session_id = loaded.session_id
        path = self.path(session_id)
        fd, made = -1, False
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            lock = WriterLock.on(fd, path, session_id)
            size = os.fstat(fd).st_size
            if loaded.size >= 0 and (
                size != loaded.size
                or os.pread(fd, len(loaded.torn), loaded.valid_bytes) != loaded.torn
            ):
                lock.release()
                raise SessionChangedError(
                    f"session {session_id!r} at {path} is not as it was when loaded "
                    f"({size} bytes, then {loaded.size}): another writer appended; load it again"
                )
            if size != loaded.valid_bytes:
                os.ftruncate(fd, loaded.valid_bytes)  # drop the torn tail before appending
            writer = _JsonlWriter(fd, path, WriterState(session_id, lock), self.snapshots)
            made = True
        except OSError as exc:
            raise LedgerError(f"cannot reopen session {session_id!r} at {path}: {exc}") from exc
        finally:
            if not made and fd != -1:
                os.close(fd)
        return writer

    async def load(self, session_id: str) -> LoadedSession:
        """The session's records (a torn last line ignored and reported). Any failure
        to read is a ``LedgerError`` naming the session and the file."""
        path = self.path(session_id)
        try:
            data = await trio.Path(path).read_bytes()
        except FileNotFoundError:
            raise SessionNotFoundError(f"no session {session_id!r} at {path}") from None
        except OSError as exc:
            raise LedgerError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        return parse_jsonl(session_id, data)

    async def load_tail(self, session_id: str) -> LoadedSession:
        """The session's records from its last snapshot on (all of them when it has
        none), read from the end of the file backwards, never whole: what a resume
        needs, at a cost bounded by the last snapshot and the records after it.
        ``reopen`` takes it as a whole ``load``. Failures as ``load``'s."""
        path = self.path(session_id)
        try:
            data, offset = await trio.to_thread.run_sync(_read_tail, path)
        except FileNotFoundError:
            raise SessionNotFoundError(f"no session {session_id!r} at {path}") from None
        except OSError as exc:
            raise LedgerError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        return parse_jsonl(session_id, data, first_seq=None if offset else 0, offset=offset)


_BLOCK: Final = 1 << 16  # the first block read from the end; each next one twice as large
_MAX_BLOCK: Final = 1 << 23
_MARK: Final = b"\n" + SNAPSHOT_LINE  # a snapshot's line, after the line before it


def _read_tail(path: Path, first: int = _BLOCK) -> tuple[bytes, int]:
    """The file's bytes from the start of its last whole snapshot line (or from 0),
    and where they start: read in blocks from the end (blocking: run in a thread).
    The blocks grow (``first`` bytes, then twice as many, up to 8 MiB), so a long
    tail costs few reads; the bytes are copied once, when they are joined."""
    with open(path, "rb", buffering=0) as file:
        fd = file.fileno()
        start = os.fstat(fd).st_size
        blocks: list[bytes] = []  # from the end backwards
        last_end = -1  # where the last whole line ends (its line end), once found
        after = b""  # the bytes after this block, as many as a mark across its end needs
        step = first
        while start > 0:
            step = min(step, start)
            start -= step
            block = os.pread(fd, step, start)
            blocks.append(block)
            if last_end < 0:
                at = block.rfind(b"\n")
                if at >= 0:
                    last_end = start + at
            if last_end >= 0:
                found = _last_mark(block, after, last_end - start)
                if found >= 0:  # its snapshot line starts at found + 1, and is whole
                    blocks[-1] = block[found + 1 :]
                    return b"".join(reversed(blocks)), start + found + 1
            after = (block[: len(_MARK)] + after)[: len(_MARK)]
            step = min(step * 2, _MAX_BLOCK)
        return b"".join(reversed(blocks)), 0


def _last_mark(block: bytes, after: bytes, limit: int) -> int:
    """Where in ``block`` the last snapshot mark starts before ``limit`` (the last
    line end, relative to the block; the mark's line is whole), ``after`` being
    the bytes that follow the block in the file; -1 if none. A mark that runs on
    past the block's end comes first: it is the later one."""
    lead = min(len(_MARK) - 1, len(block))  # where such a mark can start: the last bytes
    edge_start = len(block) - lead
    if after and limit > edge_start:
        edge = block[edge_start:] + after
        last = min(lead, limit - edge_start) - 1  # the last start allowed, in the edge
        found = edge.rfind(_MARK, 0, last + len(_MARK))
        if found >= 0:
            return edge_start + found
    return block.rfind(_MARK, 0, min(limit, len(block)) - 1 + len(_MARK))
