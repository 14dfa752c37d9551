"""Group commit in PostgresStore (issue 22): flushes of many writers that arrive while
a commit is under way go together in the next one, each session fenced by its own
lease, a failure or a cancellation only its own writer's, and a shared commit that
fails unexpectedly claims nothing stored."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing
from waiting import WAIT

from trio_agent.ledger import LeaseLostError, Ledger, LedgerError

pytest.importorskip("psycopg")


def _ledger(store, session_id):
    ledger = Ledger(store.create(session_id), 0, "step")
    ledger.session_started(session_id, 0.0, "")
    return ledger


class Gate:
    """Wraps the store's batch insert: records each batch's sessions, and holds the
    first commit in its thread until ``release()``."""

    def __init__(self, monkeypatch):
        from trio_agent.stores.postgres import _commit as _postgres_commit

        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.open = threading.Event()
        real = _postgres_commit.insert_flushes

        def insert(connection, store, batch):
            self.batches.append([f.lease.session_id for f in batch])
            if len(self.batches) == 1:
                self.entered.set()
                self.open.wait(10)
            return real(connection, store, batch)

        monkeypatch.setattr(_postgres_commit, "insert_flushes", insert)
        # which sessions' flushes reached the group commit (one that finds a commit
        # under way is queued at once, with no checkpoint between)
        self.flushing: list[str] = []
        self._changed = trio.Event()
        real_flush = _postgres_commit.GroupCommit.flush

        async def flush(commit, request):
            self.flushing.append(request.lease.session_id)
            self._changed.set()
            return await real_flush(commit, request)

        monkeypatch.setattr(_postgres_commit.GroupCommit, "flush", flush)

    async def queued(self, names):
        """Wait until the flushes of ``names`` are queued behind the held commit
        (on their arrival, not on the tasks being blocked: a flush's thread work
        before the queue looks blocked too, and on a loaded machine lasts)."""
        with trio.fail_after(WAIT):
            while not set(names) <= set(self.flushing):
                await self._changed.wait()
                self._changed = trio.Event()

    async def held(self):
        await trio.to_thread.run_sync(self.entered.wait, 10)

    def release(self):
        self.open.set()


async def _seqs(store, session_id):
    return [r.seq for r in (await store.load(session_id)).records]


async def test_flushes_queued_behind_a_commit_go_together_in_the_next(pg_store, monkeypatch):
    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a", "b")}
    gate = Gate(monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledgers["c"].barrier, "step")
        await gate.held()
        for name in ("a", "b"):
            ledgers[name].step_started("request-001")
            nursery.start_soon(ledgers[name].barrier, "step")
        await gate.queued(("a", "b"))
        gate.release()
    assert [sorted(batch) for batch in gate.batches] == [["c"], ["a", "b"]]
    for name, ledger in ledgers.items():
        await ledger.aclose()
        assert await _seqs(store, name) == ([0, 1] if name != "c" else [0])


async def test_many_sessions_share_commits(pg_store, monkeypatch):
    store = pg_store()
    ledgers = [_ledger(store, f"s{i}") for i in range(32)]
    calls = []
    real = store.call

    def counted(what, *args):
        calls.append(what)
        return real(what, *args)

    monkeypatch.setattr(store, "call", counted)

    async def work(ledger):
        for i in range(8):
            ledger.step_started(f"request-{i:03d}")
            await ledger.barrier("step")

    async with trio.open_nursery() as nursery:
        for ledger in ledgers:
            nursery.start_soon(work, ledger)
    commits = calls.count("write records")
    assert commits < 32 * 8 / 4, commits  # 256 flushes
    for i, ledger in enumerate(ledgers):
        await ledger.aclose()
        assert await _seqs(store, f"s{i}") == list(range(9))


async def _a_and_b_behind_c(ledgers, gate):
    """c's flush leads a commit held in its thread; a's and b's queue behind it and
    go together in the next. What each flush raised, by ledger (none: stored)."""
    failures = {}

    async def flush(name):
        try:
            await ledgers[name].barrier("step")
        except Exception as exc:
            failures[name] = exc

    async with trio.open_nursery() as nursery:
        ledgers["c"].step_started("request-001")
        nursery.start_soon(flush, "c")
        await gate.held()
        for name in ("a", "b"):
            ledgers[name].step_started("request-001")
            nursery.start_soon(flush, name)
        await gate.queued(("a", "b"))
        gate.release()
    return failures


async def test_a_writer_fenced_off_in_a_shared_commit_fails_alone(pg_store, monkeypatch):
    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a", "b")}
    await ledgers["c"].barrier("step")
    await ledgers["a"].barrier("step")
    await ledgers["b"].barrier("step")
    # another holder takes "a" over (its lease expired while this writer was paused)
    await store.run(
        "take a over",
        lambda c: c.execute(
            f"""UPDATE "{store.schema}".leases SET epoch = epoch + 1 WHERE session_id = 'a'"""
        ),
    )
    gate = Gate(monkeypatch)
    failures = await _a_and_b_behind_c(ledgers, gate)
    assert sorted(gate.batches[1]) == ["a", "b"]
    assert list(failures) == ["a"] and isinstance(failures["a"], LeaseLostError)
    assert await _seqs(store, "a") == [0]  # nothing of the fenced writer
    assert await _seqs(store, "b") == [0, 1]
    for ledger in ledgers.values():
        try:
            await ledger.aclose()
        except LedgerError:
            pass


async def test_a_failing_row_fails_only_its_writer(pg_store, monkeypatch):
    # the shared statement fails (a row that cannot be stored); each flush is tried
    # alone, so only the writer whose row fails sees the failure
    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a", "b")}
    for ledger in ledgers.values():
        await ledger.barrier("step")
    await store.run(
        "a row in the way",
        lambda c: c.execute(
            f"""INSERT INTO "{store.schema}".records VALUES ('a', 1, '{{}}'::bytea)"""
        ),
    )
    gate = Gate(monkeypatch)
    failures = await _a_and_b_behind_c(ledgers, gate)
    assert sorted(gate.batches[1]) == ["a", "b"]
    assert list(failures) == ["a"] and "duplicate key" in str(failures["a"])
    assert await _seqs(store, "b") == [0, 1] and await _seqs(store, "c") == [0, 1]


async def test_a_cancelled_flush_is_stored_once_whether_it_was_queued_or_sent(
    pg_store, monkeypatch
):
    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a")}
    gate = Gate(monkeypatch)
    sent_scope, queued_scope = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_in_scope, sent_scope, ledgers["c"])  # leads, held in its thread
        await gate.held()
        ledgers["a"].step_started("request-001")
        nursery.start_soon(_in_scope, queued_scope, ledgers["a"])  # queued behind it
        await gate.queued(("a",))
        queued_scope.cancel()  # leaves the queue: nothing of it sent
        sent_scope.cancel()  # under way: waits for its commit
        await trio.testing.wait_all_tasks_blocked()
        assert not sent_scope.cancelled_caught  # still waiting for the thread
        gate.release()
    assert gate.batches == [["c"]]
    for ledger in ledgers.values():
        await ledger.aclose()  # stores what is left, once
    assert await _seqs(store, "c") == [0] and await _seqs(store, "a") == [0, 1]


async def _in_scope(scope, ledger):
    with scope:
        await ledger.barrier("step")


async def test_a_shared_commit_that_fails_unexpectedly_reports_no_flush_stored(
    pg_store, monkeypatch
):
    """Issue 22 (review of the group commit): an unexpected error in a shared commit left its
    writers believing their flushes stored; every writer of the batch fails, and nothing is
    stored."""
    from trio_agent.stores.postgres import _commit as _postgres_commit

    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a", "b")}
    for ledger in ledgers.values():
        await ledger.barrier("step")
    gate = Gate(monkeypatch)
    held = _postgres_commit.insert_flushes

    def breaks_on_the_shared_batch(connection, store_, batch):
        if len(batch) > 1:
            raise RuntimeError("a bug in the driver")
        return held(connection, store_, batch)

    monkeypatch.setattr(_postgres_commit, "insert_flushes", breaks_on_the_shared_batch)
    failures = await _a_and_b_behind_c(ledgers, gate)  # the shared batch breaks
    assert "c" not in failures  # stored alone, before
    assert sorted(type(failures[name]).__name__ for name in ("a", "b")) == [
        "LedgerError",
        "RuntimeError",
    ]
    for name in ("a", "b"):  # nothing was stored, and nothing claims it was
        assert [r.seq for r in (await store.load(name)).records] == [0]
