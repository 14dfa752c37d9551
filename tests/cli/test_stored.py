"""``trio-agent show --store`` (issue 35, item 4): a session read from a JSONL store's
directory or a SQLite database, read-only, through a real subprocess."""

from __future__ import annotations

import os
import sqlite3

import msgspec
from cli_runner import TRIO_AGENT, RecordLine, cli

from trio_agent import Agent, JsonlStore, SqliteStore
from trio_agent.testing import ScriptedModel, scripted_response


async def record(store, session_id: str, answer: str = "hi") -> Agent:
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", answer)]), store=store, session_id=session_id
    )
    await agent.prompt(f"hello {session_id}")
    return agent


def said(done) -> str:
    return " ".join(done.stderr.decode().split())


async def test_show_reads_a_session_from_a_sqlite_store_without_changing_it(tmp_path):
    """Issue 35 (item 4): ``show sessions.db`` said "a ledger is a .jsonl file", and
    there was no way to read a SQLite store's session. ``show --store FILE SESSION``
    reads it (told a SQLite database by its content, whatever its name), opened
    read-only: the file is left as it was; ``show FILE`` says how to name the
    session, listing the sessions it holds; a session that is not there is named
    beside the ones that are."""
    database = tmp_path / "sessions.data"  # no telling suffix: its content tells
    store = SqliteStore(database)
    for session in ("b", "a"):
        await (await record(store, session, f"answer {session}")).aclose()
    await store.aclose()
    before = database.read_bytes()

    shown = await cli([*TRIO_AGENT, "show", "--store", str(database), "a"])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert "session a: 1 turn(s), 1 request(s)" in text
    assert "user: hello a" in text and "assistant: answer a" in text
    assert "closed cleanly by its last writer" in text
    lines = await cli([*TRIO_AGENT, "show", "--json", "--store", str(database), "b"])
    kinds = [
        msgspec.json.decode(line, type=RecordLine).record.kind for line in lines.stdout.splitlines()
    ]
    assert kinds[0] == "session/start" and kinds[-1] == "session/closed"

    hint = await cli([*TRIO_AGENT, "show", str(database)])
    assert hint.returncode == 2
    assert (
        f"{database} is a SQLite store: name the session with --store {database} SESSION "
        "(it holds: a, b)" in said(hint)
    )
    missing = await cli([*TRIO_AGENT, "show", "--store", str(database), "zz"])
    assert missing.returncode == 2
    assert f"no session 'zz' in {database} (it holds: a, b)" in said(missing)
    assert database.read_bytes() == before


async def test_show_says_who_writes_a_sqlite_session_now(tmp_path):
    """The SQLite store's writer lock is read as the JSONL one is: a session being
    written is shown as open, with its writer."""
    database = tmp_path / "live.db"
    agent = await record(SqliteStore(database), "live")
    try:
        shown = await cli([*TRIO_AGENT, "show", "--store", str(database), "live"])
        assert shown.returncode == 0, shown.stderr
        assert f"open: process {os.getpid()} on " in shown.stdout.decode()
    finally:
        await agent.aclose()
    after = await cli([*TRIO_AGENT, "show", "--store", str(database), "live"])
    assert "closed cleanly by its last writer" in after.stdout.decode()


async def test_show_reads_a_jsonl_stores_directory_and_refuses_what_is_no_store(tmp_path):
    """``--store DIR SESSION`` reads ``DIR/SESSION.jsonl``; a directory given as a
    ledger, a file that is neither, a SQLite database of another program (left
    untouched: no table is made in it), and ``--store`` beside ``--dsn`` are each
    a usage error saying what to write."""
    directory = tmp_path / "ledgers"
    await (await record(JsonlStore(directory), "c")).aclose()
    shown = await cli([*TRIO_AGENT, "show", "--store", str(directory), "c"])
    assert shown.returncode == 0, shown.stderr
    assert "session c: 1 turn(s)" in shown.stdout.decode()
    hint = await cli([*TRIO_AGENT, "show", str(directory)])
    assert hint.returncode == 2
    assert (
        f"{directory} is a directory of ledgers: name the session with --store {directory} "
        "SESSION (it holds: c)" in said(hint)
    )
    missing = await cli([*TRIO_AGENT, "show", "--store", str(directory), "d"])
    assert missing.returncode == 2 and f"no session 'd' in {directory} (it holds: c)" in said(
        missing
    )
    escape = await cli([*TRIO_AGENT, "show", "--store", str(directory), "../c"])
    assert escape.returncode == 2 and "SESSION: " in said(escape)

    notes = tmp_path / "notes.txt"
    notes.write_text("not a store\n")
    neither = await cli([*TRIO_AGENT, "show", "--store", str(notes), "c"])
    assert neither.returncode == 2
    assert f"--store {notes}: neither a directory of .jsonl ledgers nor a SQLite database" in said(
        neither
    )
    ledger = await cli([*TRIO_AGENT, "show", "--store", str(directory / "c.jsonl"), "c"])
    assert "a .jsonl file is one session: `trio-agent show FILE.jsonl`" in said(ledger)
    absent = await cli([*TRIO_AGENT, "show", "--store", str(tmp_path / "gone.db"), "c"])
    assert absent.returncode == 2 and "no such directory or file" in said(absent)

    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
    db.close()
    before = foreign.read_bytes()
    other = await cli([*TRIO_AGENT, "show", "--store", str(foreign), "c"])
    assert other.returncode == 2
    assert f"{foreign} is a SQLite database, but no trio-agent store (no table records)" in said(
        other
    )
    assert foreign.read_bytes() == before

    both = await cli([*TRIO_AGENT, "show", "--store", str(directory), "--dsn", "x", "c"])
    assert both.returncode == 2 and "not allowed with argument" in said(both)


async def test_show_reads_a_record_edited_by_hand_as_text(tmp_path):
    """Bug: a record's body set by hand in the ``sqlite3`` shell (stored as TEXT, not
    a BLOB) made ``show --store`` end in a ``TypeError`` traceback; it is read as
    its UTF-8."""
    database = tmp_path / "sessions.db"
    store = SqliteStore(database)
    await (await record(store, "a", "answer a")).aclose()
    await store.aclose()
    with sqlite3.connect(database) as db:
        (body,) = db.execute("SELECT body FROM records WHERE seq = 2").fetchone()
        db.execute("UPDATE records SET body = ? WHERE seq = 2", (bytes(body).decode(),))
    db.close()
    shown = await cli([*TRIO_AGENT, "show", "--store", str(database), "a"])
    assert shown.returncode == 0, said(shown)
    assert "user: hello a" in shown.stdout.decode()


async def test_a_stored_name_with_escape_sequences_is_shown_inert(tmp_path):
    """Bug: the usage error of ``show DIR`` lists the sessions the directory holds by
    their file names, written to the terminal as they were: a name holding an
    escape sequence (a downloaded archive's) drove the terminal (retitled it, or
    worse). Error texts show their control characters as ``\\xNN``."""
    store = JsonlStore(tmp_path)
    await (await record(store, "a")).aclose()
    os.link(store.path("a"), tmp_path / "x\x1b]0;owned\x07y.jsonl")
    for argv in (["show", str(tmp_path)], ["show", "--store", str(tmp_path), "nope"]):
        done = await cli([*TRIO_AGENT, *argv])
        assert done.returncode == 2
        assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
        assert "x\\x1b]0;owned\\x07y" in done.stderr.decode()
