"""Group-commit fsyncs (``stores/_fsync.py``): a few threads shared by many open
ledgers, a closed file's waiter woken, a process that forks (issue 12), and an fsync
error that fails visibly."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import trio
import trio.testing
from helpers import add
from ledger_scenario import script
from paths import SUPPORT
from waiting import WAIT, wait_until

from trio_agent import Agent, JsonlStore, LedgerError, ToolRegistry, UserMessage
from trio_agent.ledger import Ledger
from trio_agent.stores._fsync import MAX_FSYNC_THREADS
from trio_agent.testing import ScriptedModel


def fsync_threads() -> int:
    return sum(t.name == "trio-agent-fsync" for t in threading.enumerate())


async def test_many_open_ledgers_share_a_few_fsync_threads(tmp_path):
    """Issue 12: each open ledger had an fsync thread of its own (200 threads for 200 ledgers); they
    share a few."""
    store = JsonlStore(tmp_path)
    ledgers = [Ledger(store.create(f"s{i}"), 0, "step") for i in range(200)]
    most = 0

    async def one(ledger):
        nonlocal most
        ledger.session_started("s", 0.0, "")
        for i in range(4):
            ledger.step_started(f"request-{i:03d}")
            await ledger.barrier("step")
            most = max(most, fsync_threads())

    async with trio.open_nursery() as nursery:
        for ledger in ledgers:
            nursery.start_soon(one, ledger)
    for ledger in ledgers:
        await ledger.aclose()
    assert 1 <= most <= MAX_FSYNC_THREADS  # one thread per ledger was 200
    for i in range(200):
        assert len((await store.load(f"s{i}")).records) == 5


async def test_regression_sync_is_a_checkpoint_when_its_lines_are_on_disk_already(tmp_path):
    """Bug (an exploration on a loaded machine): ``sync()`` of lines an earlier
    fsync covered returned without a checkpoint, and whether one had depended on
    the threads' timing. So a turn's checkpoints varied from run to run, and
    ``explore_cancellation`` cancelled within a run at its last checkpoint."""
    from trio_agent.stores import _fsync

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    synced = _fsync.SyncedFile(fd)
    try:
        os.write(fd, b"a line\n")
        synced.written += 1
        await synced.sync()  # waits for its fsync
        assert synced.synced >= synced.written
        with trio.testing.assert_checkpoints():
            await synced.sync()  # nothing to wait for: still a checkpoint
    finally:
        synced.close()
        os.close(fd)


async def test_closing_a_file_whose_fsync_waits_in_the_queue_wakes_its_waiter(
    tmp_path, monkeypatch
):
    """Issue 12 (review): closing a file whose fsync waited in the queue left its waiter waiting for
    ever; it is told the file closed."""
    from trio_agent.stores import _fsync

    real = os.fsync
    busy_fsyncs, release = [], threading.Event()

    def held(fd):  # a slow disk: each fsync waits until the test lets it go
        busy_fsyncs.append(fd)
        release.wait(WAIT)
        real(fd)

    monkeypatch.setattr(_fsync.os, "fsync", held)
    files = [
        _fsync.SyncedFile(os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT))
        for i in range(MAX_FSYNC_THREADS + 2)
    ]
    *busy, target = files
    outcome = []
    told = trio.Event()

    async def waiter():
        try:
            await target.sync()
            outcome.append("returned")
        except _fsync.FsyncClosedError:
            outcome.append("closed")
        told.set()

    async with trio.open_nursery() as nursery:
        for file in busy:  # every pool thread busy, one more file queued
            file.written += 1
            nursery.start_soon(file.sync)
        await wait_until(lambda: len(busy_fsyncs) == MAX_FSYNC_THREADS)
        target.written += 1
        nursery.start_soon(waiter)
        await wait_until(lambda: target.queued)  # queued behind the busy ones
        await trio.to_thread.run_sync(target.close)
        release.set()  # the pool's threads go on, and come to the closed file
        with trio.fail_after(WAIT):
            await told.wait()
    assert outcome == ["closed"]  # told, not left waiting forever
    for file in files:
        os.close(file.fd)


@pytest.mark.parametrize("mode", ["fsync", "lock", "sqlite"])
async def test_a_process_that_forks_keeps_fsyncing_and_lets_its_locks_go(tmp_path, mode):
    """Issue 12 (review): a forked child's fsync pool had no thread, so its fsync never ran; and a
    forked child kept the SQLite lock file open, and the lock with it. Issue 36: a SQLite store's
    connection now stays open between sessions, so a forked child would have used its parent's
    (SQLite forbids it): the child opens its own and the parent's goes on."""
    child = SUPPORT / "fork_child.py"
    with trio.fail_after(180):  # a hang guard: the child's own turns allow a minute each
        done = await trio.run_process(
            [sys.executable, str(child), str(tmp_path), mode], capture_stdout=True, check=False
        )
    lines = done.stdout.decode().splitlines()
    if mode == "fsync":  # the child's pool had no thread: its fsync never ran
        assert lines == ["parent completed", "child completed"], lines
    elif mode == "sqlite":  # the child used the parent's connection (issue 36's shared one)
        assert lines == [
            "parent completed",
            "child completed",
            "child connections opened: 1",
            "parent completed",
            "stored [True, True]",
        ], lines
    else:  # a forked child kept the SQLite lock file open, and the lock with it
        assert lines == ["resumed after aclose"], lines


async def test_an_fsync_error_fails_visibly_and_closing_does_not_hang(tmp_path, monkeypatch):
    """An fsync error hung the turn and the close; it fails both visibly."""

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        store=JsonlStore(tmp_path),
        session_id="s1",
        fsync="always",
    )
    with trio.fail_after(WAIT):  # a hang guard
        with pytest.raises(LedgerError, match="fsync failed"):
            await agent.prompt(UserMessage("u1", "go"))
        with pytest.raises(LedgerError, match="fsync failed"):
            await agent.aclose()
