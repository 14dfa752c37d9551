"""Sessions as rows of one SQLite database (``SqliteStore``): its one connection, shared
by its sessions, needs no closing by hand (review 14) and costs a session nothing (issue
36); a session that exists, thread hops, records before
events; a full disk, a failed insert, a file that is not our database, a busy
database (issue 12); and ``sqlite3`` imported only when a SqliteStore is used (issue
14)."""

from __future__ import annotations

import gc
import os
import sqlite3
import subprocess
import sys
import textwrap
import weakref
from contextlib import closing
from functools import partial

import msgspec
import pytest
import trio
from helpers import add
from ledger_scenario import agent_on, records_of, script, sums
from paths import ROOT
from sessions import model

from trio_agent import (
    Agent,
    LedgerCorruptError,
    LedgerError,
    SqliteStore,
    ToolRegistry,
    UserMessage,
)
from trio_agent.ledger import Ledger, ToolCallRecord, ToolResultRecord, derive, record_decoder
from trio_agent.testing import ScriptedModel, scripted_response

TRACKED_CONNECTIONS = """
import sqlite3, weakref

connections = []  # weak references to every connection the store opened
_connect = sqlite3.connect


class Tracked(sqlite3.Connection):  # a plain Connection takes no weak reference
    pass


def connect(*args, **kwargs):
    connection = _connect(*args, factory=Tracked, **kwargs)
    connections.append(weakref.ref(connection))
    return connection


sqlite3.connect = connect


def still_open():
    alive = [c for c in (ref() for ref in connections) if c is not None]
    found = []
    for connection in alive:
        try:
            connection.execute("SELECT 1")
        except sqlite3.ProgrammingError:  # closed
            continue
        found.append(connection)
    return found
"""

SQLITE_SESSION = """
import gc, sys, warnings
from pathlib import Path

warnings.simplefilter("error")

import trio
from trio_agent import Agent, SessionExistsError, SqliteStore
from trio_agent.testing import ScriptedModel, scripted_response


def model():
    return ScriptedModel([scripted_response("r1", "one"), scripted_response("r2", "two")])


async def main(path):
    store = SqliteStore(path)
    agent = Agent(model=model(), store=store, session_id="s")
    await agent.prompt("hi")
    assert len(still_open()) == 1, "the writer uses the store's connection"
    await agent.aclose()
    assert len(still_open()) == 1, "the store's connection outlives its sessions"
    await store.aclose()
    assert still_open() == [] and len(connections) == 1
    assert not Path(f"{path}-wal").exists()  # closing the connection checkpoints the log
    await store.load("s")
    async with await Agent.resume(store, "s", model=model()) as resumed:
        await resumed.prompt("again")
    assert len(still_open()) == 1 and len(connections) == 2, "one connection for all of it"
    try:
        await Agent(model=model(), store=store, session_id="s").prompt("twice")
    except SessionExistsError:
        pass
    return store


async def forgotten(path):
    # Neither the agent nor the store is ever closed: collecting them closes it.
    agent = Agent(model=model(), store=SqliteStore(path), session_id="forgotten")
    await agent.prompt("left open")
    return still_open()


store = trio.run(main, sys.argv[1])
del store  # a failed create (SessionExistsError) left it open: collecting the store closes it
gc.collect()
assert still_open() == [], "the store was collected, but its connection is open"
held = trio.run(forgotten, sys.argv[1])
assert len(held) == 1, held
gc.collect()
assert still_open() == [], "the store was collected, but its connection is open"
del held
gc.collect()


async def kept_open(path):
    store = SqliteStore(path)
    await store.load("s")
    return store


KEPT = trio.run(kept_open, sys.argv[1])  # open at exit: the store's finalizer closes it
assert len(still_open()) == 1
print("ok")
"""


def test_regression_a_sqlite_store_closes_its_connection_without_store_aclose(tmp_path):
    """Review 14 (sessions and stores): a SQLite store's connection was left open at
    collection unless ``store.aclose()`` was called, which nobody does (Python 3.13 warns
    "unclosed database"); collecting the store closes it, and so does the program's exit.
    Issue 36: it no longer closes with each store's last session (its sessions share it)."""
    # Python 3.13 warns "ResourceWarning: unclosed database" when a connection is
    # collected open; 3.11 says nothing, so the script also checks each connection.
    script = tmp_path / "session.py"
    script.write_text(TRACKED_CONNECTIONS + textwrap.dedent(SQLITE_SESSION))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script), str(tmp_path / "db" / "s.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "ResourceWarning" not in done.stderr and "Exception ignored" not in done.stderr, (
        done.stderr
    )


@pytest.fixture
def tracked(monkeypatch):
    """Every connection a ``SqliteStore`` opens, weakly; ``open()`` lists those still open."""
    refs: list[weakref.ref[sqlite3.Connection]] = []
    refs_made = refs
    connect = sqlite3.connect

    class Tracked(sqlite3.Connection):
        pass

    def tracking(*args, **kwargs):
        connection = connect(*args, factory=Tracked, **kwargs)
        refs.append(weakref.ref(connection))
        return connection

    monkeypatch.setattr(sqlite3, "connect", tracking)

    class Connections:
        refs = refs_made

        @staticmethod
        def open() -> list[sqlite3.Connection]:
            found = []
            for connection in filter(None, (ref() for ref in refs)):
                try:
                    connection.execute("SELECT 1")
                except sqlite3.ProgrammingError:
                    continue
                found.append(connection)
            return found

    return Connections


async def test_a_sqlite_stores_sessions_share_one_connection_that_outlives_them(tmp_path, tracked):
    """Issue 36: each session opened the store's connection and its close closed it
    (checkpointing the write-ahead log), so a new SQLite session cost 11x what it had
    and 6x a JSONL one. The store's sessions share one connection, open until the
    store closes; the log is checkpointed by its size."""
    store = SqliteStore(tmp_path / "s.db")
    first = Agent(model=model(), store=store, session_id="a")
    second = Agent(model=model(), store=store, session_id="b")
    await first.prompt("one")
    await second.prompt("two")
    await first.aclose()
    await second.prompt("three")
    await second.aclose()
    for index in range(5):
        async with Agent(model=model(), store=store, session_id=f"s{index}") as agent:
            await agent.prompt("short")
    resumed = await Agent.resume(store, "a", model=model())
    await resumed.prompt("four")
    await resumed.aclose()
    dropped = Agent(model=model(), store=store, session_id="dropped")
    await dropped.prompt("never closed")  # a crash, as far as its ledger tells
    del dropped
    gc.collect()
    assert [len((await store.load(i)).records) > 0 for i in ("a", "b", "s4")] == [True] * 3
    assert len(tracked.open()) == 1 and len(tracked.refs) == 1, "one connection for all"
    await store.aclose()
    assert tracked.open() == []
    assert not (tmp_path / "s.db-wal").exists()  # closing the connection checkpoints the log
    await store.load("a")  # opened again on use
    assert len(tracked.open()) == 1
    await store.aclose()


async def test_the_sqlite_write_ahead_log_is_checkpointed_by_its_size(tmp_path, tracked):
    """Issue 36: with the connection open for the store's life, no close checkpoints the
    log: SQLite does when it passes its size (1000 pages), so it never grows past that
    by more than a transaction, however much is written."""
    store = SqliteStore(tmp_path / "s.db")
    ledger = await trio.to_thread.run_sync(
        partial(
            Ledger.create,
            store.create,
            "big",
            "never",
            system="",
            first_request=1,
            first_sequence=0,
            metadata=None,
            messages=(),
        )
    )
    (connection,) = tracked.open()
    (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    (pages,) = connection.execute("PRAGMA wal_autocheckpoint").fetchone()
    assert pages == 1000
    text = "x" * 100_000
    for index in range(80):  # 8 MB in 80 transactions, twice the log's checkpoint size
        ledger.message(UserMessage(f"u{index}", text))
        await ledger.barrier("step")
    await ledger.aclose()
    wal = (tmp_path / "s.db-wal").stat().st_size
    assert wal < pages * page_size + 4 * len(text), wal
    assert len((await store.load("big")).records) > 80
    await store.aclose()


async def test_a_cancelled_sqlite_store_aclose_still_closes_the_connection(tmp_path, tracked):
    """Review 14 (sessions and stores): a cancelled close still closes the connection
    (shielded while the connection is free)."""
    store = SqliteStore(tmp_path / "s.db")
    made = partial(
        Ledger.create,
        store.create,
        "a",
        "step",
        system="",
        first_request=1,
        first_sequence=0,
        metadata=None,
        messages=(),
    )
    ledger = await trio.to_thread.run_sync(made)  # its first records are stored
    assert len(tracked.open()) == 1
    with trio.CancelScope() as scope:
        scope.cancel()
        await ledger.aclose()  # the sync it owes is cancelled; the close is not
    assert scope.cancelled_caught
    assert len(tracked.open()) == 1, "the store's connection outlives its sessions"
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.aclose()
    assert tracked.open() == []
    await store.aclose()  # harmless when nothing is open
    assert "never required" in (SqliteStore.aclose.__doc__ or "").lower()


async def test_sqlite_refuses_an_existing_session_with_a_clear_error(tmp_path):
    """SQLite refused an existing session only at a later flush, and kept its lock; it refuses it at
    once, clearly, and lets the lock go."""
    store = SqliteStore(tmp_path / "s.db")
    async with Agent(model=ScriptedModel([]), store=store, session_id="dup"):
        pass
    second = Agent(model=ScriptedModel([]), store=store, session_id="dup")
    with pytest.raises(LedgerError, match="already exists"):  # at once, not at a later flush
        async with second:  # its first use (issue 14)
            pass
    # the refused writer let the lock go: the session can be resumed right away
    resumed = await Agent.resume(store, "dup", model=ScriptedModel([]))
    await resumed.aclose()
    await store.aclose()


async def test_sqlite_always_makes_no_empty_thread_hops(tmp_path, monkeypatch):
    """SQLite with ``fsync="always"`` made a thread hop for every flush, even with nothing to
    store."""
    store = SqliteStore(tmp_path / "s.db")
    hops = []
    real_run = store.run

    async def counting(what, function, *args):
        hops.append(function.__name__)
        return await real_run(what, function, *args)

    monkeypatch.setattr(store, "run", counting)
    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        fsync="always",
    )
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    records = len((await store.load("s1")).records)
    assert hops.count("insert") <= records and hops.count("sync_wal") == 0
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == records
    conn.close()
    await store.aclose()


async def test_every_record_precedes_its_event_with_sqlite_too(tmp_path):
    """With SQLite, an event could be observed before its record was stored."""
    store = SqliteStore(tmp_path / "s.db")
    agent = Agent(
        model=ScriptedModel(script()), tools=ToolRegistry([add]), store=store, session_id="s1"
    )

    def stored():
        conn = sqlite3.connect(tmp_path / "s.db")
        try:
            rows = conn.execute("SELECT body FROM records ORDER BY seq").fetchall()
        finally:
            conn.close()
        return [record_decoder.decode(bytes(r[0])) for r in rows]

    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            records = stored()
            if event.type == "tool.started":
                assert any(
                    isinstance(r, ToolCallRecord) and r.call_id == event.call.id for r in records
                )
            if event.type == "tool.finished":
                assert any(
                    isinstance(r, ToolResultRecord) and r.result == event.result for r in records
                )
    await agent.aclose()
    await store.aclose()


async def test_sqlite_disk_full_is_a_ledger_error_and_does_not_wedge_the_store(tmp_path):
    """Issue 12: SQLite's "database or disk is full" came out raw and left a transaction open that
    wedged the store; it is a LedgerError, and the store works again."""
    store = SqliteStore(tmp_path / "s.db")
    keep = agent_on(store, sums("k"), session_id="other")
    agent = agent_on(store, sums())
    pages = store.call("count pages", lambda: store._db().execute("PRAGMA page_count").fetchone())
    # SQLite's own "database or disk is full", from a page limit at the current size
    store.call("cap", lambda: store._db().execute(f"PRAGMA max_page_count={pages[0]}"))
    with pytest.raises(LedgerError, match="database or disk is full") as info:
        await agent.prompt(UserMessage("u1", "x" * 20_000))
    assert isinstance(info.value.__cause__, sqlite3.Error)
    assert not store.call("look", lambda: store._db().in_transaction)  # rolled back
    store.call("uncap", lambda: store._db().execute("PRAGMA max_page_count=1073741823"))
    # the store works again: another session, and this one resumed
    assert (await keep.prompt(UserMessage("u1", "go"))).final_text == "3 and 7"
    await keep.aclose()
    resumed = await Agent.resume(
        store, "s1", model=ScriptedModel([scripted_response("n", "ok")]), tools=ToolRegistry([add])
    )
    assert (await resumed.prompt(UserMessage("u2", "retry"))).final_text == "ok"
    await resumed.aclose()
    derive(await records_of(store))
    await store.aclose()


async def test_a_failed_sqlite_insert_is_rolled_back_so_later_flushes_work(tmp_path):
    """Issue 12: SQLite rolls back by itself on a full disk, but not on a statement error such as
    "string or blob too big": the transaction stayed open, and every later flush failed with "Safety
    level may not be changed inside a transaction"."""
    store = SqliteStore(tmp_path / "s.db")
    agent = agent_on(store, sums())
    other = agent_on(store, sums("o"), session_id="other")
    store.call("limit", lambda: store._db().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 5000))
    with pytest.raises(LedgerError, match="too big"):
        await agent.prompt(UserMessage("u1", "x" * 10_000))
    store.call("unlimit", lambda: store._db().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10**9))
    assert (await other.prompt(UserMessage("u1", "go"))).final_text == "3 and 7"
    await other.aclose()
    derive(await records_of(store, "other"))
    await store.aclose()


async def test_a_file_that_is_not_a_database_is_a_corrupt_ledger_not_a_raw_sqlite_error(tmp_path):
    """Issue 12: a file that is not a database came out as a raw sqlite3 error; it is a corrupt
    ledger."""
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database, just some text " * 200)
    store = SqliteStore(path)
    with pytest.raises(LedgerCorruptError, match="not a database") as info:
        await store.load("s1")
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    agent = Agent(model=ScriptedModel([]), store=store, session_id="s1")
    with pytest.raises(LedgerCorruptError):  # on first use (issue 14)
        async with agent:
            pass


async def test_a_database_with_another_schema_is_refused_clearly(tmp_path):
    """Issue 12: a database of another schema failed obscurely; it is refused, saying it is not a
    trio-agent session database."""
    path = tmp_path / "s.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, payload TEXT)")
    store = SqliteStore(path)
    with pytest.raises(LedgerCorruptError, match="not a trio-agent session database"):
        await store.load("s1")


async def test_sqlite_an_unopenable_path_is_a_ledger_error(tmp_path):
    """Issue 12: an unopenable SQLite path came out as a raw sqlite3 error; it is a LedgerError."""
    store = SqliteStore(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(LedgerError, match="unable to open database file"):
        await store.load("s1")


async def test_sqlite_stores_step_start_before_the_model_is_called(tmp_path):
    """Issue 12: SQLite stored step/start after the model was called, so a crash could lose the
    request's record."""
    path = tmp_path / "s.db"
    seen = []

    class Watching(ScriptedModel):
        def stream(self, request):
            with closing(sqlite3.connect(path)) as db, db:
                rows = db.execute("SELECT body FROM records ORDER BY seq").fetchall()
            seen.append((request.id, [msgspec.json.decode(r[0]).get("request_id") for r in rows]))
            return super().stream(request)

    agent = Agent(
        model=Watching(sums()), tools=ToolRegistry([add]), store=SqliteStore(path), session_id="s1"
    )
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert [request in stored for request, stored in seen] == [True, True]


async def test_sqlite_stores_a_new_session_when_its_agent_is_first_used(tmp_path):
    """Issue 12: SQLite stored a new session only at its first flush; it is stored on first use."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    agent = Agent(
        model=ScriptedModel([]), store=store, session_id="s1", messages=[UserMessage("u0", "hi")]
    )
    assert not path.exists()  # nothing is created in __init__ (issue 14)
    async with agent:
        # before any flush: as if the process died now
        with closing(sqlite3.connect(path)) as db, db:
            kinds = [
                msgspec.json.decode(r[0])["kind"]
                for r in db.execute("SELECT body FROM records WHERE session_id = 's1' ORDER BY seq")
            ]
        assert kinds == ["session/start", "message"]
    await store.aclose()


async def test_sqlite_creating_a_session_never_waits_on_a_busy_database(tmp_path, monkeypatch):
    """Issue 12 (review): creating a SQLite session waited on a busy database (SQLite's busy wait is
    5 s); the first records go with the first flush instead."""
    from trio_agent.stores import _sqlite

    monkeypatch.setattr(_sqlite, "_BUSY_MS", 120_000)  # a wait on the lock would take minutes
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute(
        "CREATE TABLE IF NOT EXISTS records (session_id TEXT NOT NULL, seq INTEGER"
        " NOT NULL, body BLOB NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
    )
    other.execute("BEGIN IMMEDIATE")  # another process is writing
    agent = agent_on(store, [scripted_response("r1", "ok")])
    started = trio.current_time()
    async with agent:  # the session is created here, in a worker thread
        assert trio.current_time() - started < 40  # a third of SQLite's busy wait
        other.execute("COMMIT")
        other.close()
        # the first records went with the first flush instead; nothing is lost
        assert (await agent.prompt(UserMessage("u1", "go"))).final_text == "ok"
    assert [r.kind for r in await records_of(store)][:2] == ["session/start", "turn/start"]
    await store.aclose()


def test_importing_the_package_does_not_import_sqlite3(tmp_path):
    """Issue 14: sqlite3 is loaded when a SqliteStore is first used, not by the package, its JSONL
    sessions or a SqliteStore made."""
    code = f"""
import sys, trio, trio_agent
assert 'sqlite3' not in sys.modules, 'imported by import trio_agent'
from trio_agent import Agent, JsonlStore, SqliteStore
from trio_agent.testing import ScriptedModel, scripted_response
assert 'sqlite3' not in sys.modules, 'imported with the stores'

async def session(store):
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=store)
    async with agent:
        await agent.prompt("hi")

trio.run(session, JsonlStore({str(tmp_path / "jsonl")!r}))
assert 'sqlite3' not in sys.modules, 'imported by a JSONL session'
store = SqliteStore({str(tmp_path / "s.db")!r})
assert 'sqlite3' not in sys.modules, 'imported by making a SqliteStore'
trio.run(session, store)
trio.run(store.aclose)
assert 'sqlite3' in sys.modules
print('ok')
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    bare = subprocess.run(  # as the issue states it
        [sys.executable, "-c", "import trio_agent, sys; assert 'sqlite3' not in sys.modules"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 0, bare.stderr


async def test_a_record_edited_by_hand_as_text_loads_as_its_json(tmp_path):
    """Bug: a record's body set by hand in the ``sqlite3`` shell is stored as TEXT,
    not a BLOB: ``load`` and ``load_tail`` failed with a bare ``TypeError`` (bytes of
    a str). Text is read as its UTF-8, so the edit loads; a body that is no record
    is a ``LedgerCorruptError`` naming its line."""
    store = SqliteStore(tmp_path / "s.db")
    agent = agent_on(store, sums())
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    await store.aclose()
    with closing(sqlite3.connect(tmp_path / "s.db")) as db:
        (body,) = db.execute("SELECT body FROM records WHERE seq = 2").fetchone()
        edited = bytes(body).decode().replace('"go"', '"gone"')
        db.execute("UPDATE records SET body = ? WHERE seq = 2", (edited,))
        db.commit()
    for load in (store.load, store.load_tail):
        records = (await load("s1")).records
        assert derive(records).messages[0] == UserMessage("u1", "gone")
    with closing(sqlite3.connect(tmp_path / "s.db")) as db:
        db.execute("UPDATE records SET body = 7 WHERE seq = 2")
        db.commit()
    with pytest.raises(LedgerCorruptError, match="line 3 is corrupt"):
        await store.load("s1")
    await store.aclose()


def test_a_database_in_memory_is_refused_as_no_store(tmp_path, monkeypatch):
    """Bug: ``SqliteStore(":memory:")`` made a store whose sessions lived in its one
    connection: ``aclose()`` (or the store's collection) lost them all without a
    word, and a ``:memory:.locks`` directory was left in the working directory.
    It is a ``ValueError``; nothing is made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="needs a database file"):
        SqliteStore(":memory:")
    assert list(tmp_path.iterdir()) == []
