"""Group-commit fsyncs for many open files from a few shared threads.

A ledger file writes its records to the OS at once, on the trio thread, and
``await SyncedFile.sync()`` waits until an fsync that began after the last
write has finished; one fsync covers every record written before it began
(group commit). Every file of the process shares one small pool of threads
(at most ``MAX_FSYNC_THREADS``): with a thread per file, 2,000 open ledgers
needed 2,001 threads. Threads start as work arrives, when every one is busy,
and stay for the life of the process (an idle one costs nothing but its
stack; one that waits with a timeout, to end when idle, was measurably slower
to wake). Waiters are trio tasks woken through their trio token, so a wait
costs no thread hop of its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from typing import Final, final

import trio

__all__ = ["MAX_FSYNC_THREADS", "FsyncClosedError", "SyncedFile"]

MAX_FSYNC_THREADS: Final = 4
"""Threads that fsync for every ledger of the process, at most."""


class FsyncClosedError(Exception):
    """``sync()`` on a file that was closed."""


@final
class _Pool:
    """The shared threads and the queue of files waiting for an fsync."""

    def __init__(self, max_threads: int) -> None:
        self.max_threads = max_threads
        self.files: weakref.WeakSet[SyncedFile] = weakref.WeakSet()
        self.reset()

    def reset(self) -> None:
        """A pool with no thread and no work: at start, and in the child of a fork
        (which has none of the parent's threads, and may hold its lock)."""
        lock = threading.RLock()  # not a Lock: Condition uses an RLock's C fast paths
        self.lock = threading.Condition(lock)  # work for the threads
        self.ended = threading.Condition(lock)  # an fsync ended (close() waits for it)
        self.queue: deque[SyncedFile] = deque()
        self.threads = 0
        self.busy = 0  # threads between taking a file and having fsynced it
        for file in self.files:  # none is queued or being fsynced in this process
            file.queued = file.in_flight = False

    def submit(self, file: SyncedFile) -> None:
        """Queue ``file`` (its request is already recorded) and get a thread to it;
        called holding ``lock``. A file whose fsync is in flight is queued again
        by the thread running it."""
        if file.queued or file.in_flight:
            return
        file.queued = True
        self.queue.append(file)
        if len(self.queue) > self.threads - self.busy and self.threads < self.max_threads:
            self.threads += 1
            threading.Thread(target=self._run, name="trio-agent-fsync", daemon=True).start()
        else:
            self.lock.notify()

    def _take(self) -> tuple[SyncedFile, int]:
        """The next file to fsync and the lines it will cover (waiting for one);
        called holding ``lock``."""
        while True:
            while not self.queue:
                self.lock.wait()
            file = self.queue.popleft()
            file.queued = False
            if file.closing:
                file.notify()  # its waiters learn it was closed
            elif file.requested > file.synced:
                file.in_flight = True
                self.busy += 1
                return file, file.written  # every line written so far is covered

    def _run(self) -> None:
        """A pool thread, forever: one lock section per fsync (finishing the last one
        and taking the next), so the trio thread rarely waits on the lock."""
        lock = self.lock
        lock.acquire()
        while True:
            file, target = self._take()
            lock.release()
            error: OSError | None = None
            try:
                os.fsync(file.fd)
            except OSError as exc:
                error = exc
            lock.acquire()
            self.busy -= 1
            file.in_flight = False
            file.fsyncs += 1
            file.synced = max(file.synced, target)
            if error is not None:
                file.error = error
            elif file.requested > file.synced and not file.closing:
                file.queued = True  # more was asked for while this one ran
                self.queue.append(file)
            if file.closing:
                self.ended.notify_all()  # close() waits for this fsync to end
            file.notify()


_POOL = _Pool(MAX_FSYNC_THREADS)
os.register_at_fork(after_in_child=_POOL.reset)


@final
class SyncedFile:
    """One file's group commit on the shared pool.

    The trio thread counts lines in ``written`` after each write; ``sync()``
    waits until they are on disk. An fsync error is sticky: every later
    ``sync()`` raises it (``OSError``), as the kernel may have dropped the
    dirty pages for good.
    """

    __slots__ = (
        "__weakref__",
        "closing",
        "error",
        "fd",
        "fsyncs",
        "in_flight",
        "queued",
        "requested",
        "synced",
        "token",
        "waiters",
        "written",
    )

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0  # lines written so far (trio thread)
        self.requested = 0  # the pool's fields below are guarded by _POOL.lock
        self.synced = 0
        self.error: OSError | None = None
        self.closing = False
        self.queued = False
        self.in_flight = False
        self.fsyncs = 0
        self.token: trio.lowlevel.TrioToken | None = None
        self.waiters: list[tuple[int, trio.Event]] = []  # trio thread only
        _POOL.files.add(self)

    async def sync(self) -> None:
        """Wait until every line written so far is on disk.

        Always a checkpoint, as a trio async function is: also when an fsync
        already covered the lines. Whether one did depends on the threads'
        timing, so otherwise a turn's checkpoints varied from run to run, and
        ``explore_cancellation`` saw a run that completed before cancelled
        at its last checkpoint on a loaded machine.

        Cancellation: the wait is abandoned; the fsync goes on in the pool
        and covers the lines anyway. Raises the fsync's ``OSError``, or
        ``FsyncClosedError`` once ``close()`` was called.
        """
        if self.error is not None:
            raise self.error
        if self.closing:
            raise FsyncClosedError("the file is closed")
        target = self.written
        if self.synced >= target:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        self.waiters.append((target, event))
        with _POOL.lock:
            self.token = trio.lowlevel.current_trio_token()
            self.requested = max(self.requested, target)
            _POOL.submit(self)
        await event.wait()
        if self.error is not None:
            raise self.error
        if self.synced < target:
            raise FsyncClosedError("the file was closed before its lines were on disk")

    def notify(self) -> None:
        """Have the trio thread run ``wake`` (from a pool thread)."""
        if self.token is not None:
            try:
                self.token.run_sync_soon(self.wake)
            except trio.RunFinishedError:
                pass

    def wake(self) -> None:
        """Set the events of waiters whose lines are on disk, or that wait in vain
        (the fsync failed, or the file was closed); trio thread."""
        synced, done = self.synced, self.error is not None or self.closing
        waiting = []
        for target, event in self.waiters:
            if target <= synced or done:
                event.set()
            else:
                waiting.append((target, event))
        self.waiters = waiting

    def close(self) -> None:
        """No more fsyncs: waits (blocking: call it in a worker thread) for one
        in flight to end, so the descriptor can be closed after it."""
        with _POOL.lock:
            self.closing = True
            while self.in_flight:
                _POOL.ended.wait()
