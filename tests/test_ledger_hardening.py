"""Regressions of the ledger and its stores found by trying to break them (issue 12).

Each test is named after the hole it pins; each fails without its fix.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import sys
import threading
from contextlib import closing
from pathlib import Path

import msgspec
import pytest
import trio
from helpers import add, call
from paths import SUPPORT

from trio_agent import (
    MAX_ARGUMENT_ENTRIES,
    TOOL_CANCELLED,
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AssistantMessage,
    FatalToolError,
    JsonlStore,
    LedgerCorruptError,
    LedgerError,
    SessionChangedError,
    SessionLockedError,
    SqliteStore,
    TextBlock,
    ToolCall,
    ToolRegistry,
    Usage,
    UserMessage,
    tool,
)
from trio_agent.ledger import (
    SEQUENCE_BLOCK,
    TOOL_FATAL,
    Ledger,
    MessageRecord,
    SessionStartRecord,
    ToolCallRecord,
    ToolCancelledRecord,
    ToolResultRecord,
    TurnStartRecord,
    derive,
    encode_records,
    record_decoder,
)
from trio_agent.stores import _jsonl, parse_jsonl
from trio_agent.stores._fsync import MAX_FSYNC_THREADS
from trio_agent.testing import ScriptedModel, scripted_response


@pytest.fixture
def store(ledger_store):
    return ledger_store


def sums(prefix: str = "r", usage: Usage | None = None):
    """Two steps: two add calls, then an answer."""
    return [
        scripted_response(
            f"{prefix}1",
            [
                call("add", f"{prefix}c1", {"left": 1, "right": 2}),
                call("add", f"{prefix}c2", {"left": 3, "right": 4}),
            ],
            usage=usage,
        ),
        scripted_response(f"{prefix}2", "3 and 7", usage=usage),
    ]


def agent_on(store, script, session_id="s1", **options) -> Agent:
    tools = options.pop("tools", ToolRegistry([add]))
    return Agent(
        model=ScriptedModel(script), tools=tools, store=store, session_id=session_id, **options
    )


async def records_of(store, session_id="s1"):
    return (await store.load(session_id)).records


# ------------------------------------------------------------- 1. one writer


async def test_two_writers_of_one_session_are_refused_instead_of_corrupting_it(store):
    first = agent_on(store, sums("a"))
    await first.prompt(UserMessage("u1", "go"))
    await first.aclose()
    one = await Agent.resume(store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add]))
    with pytest.raises(SessionLockedError, match=r"already has a writer: this process holds .*s1"):
        await Agent.resume(store, "s1", model=ScriptedModel(sums("c")), tools=ToolRegistry([add]))
    with pytest.raises(SessionLockedError):  # creating it again is refused the same way
        async with agent_on(store, []):  # (on first use: issue 14)
            pass
    await one.prompt(UserMessage("u2", "again"))
    await one.aclose()
    # the session loads whole, and the lock went with the writer
    derived = derive(await records_of(store))
    assert derived.turns == 2 and derived.closed
    two = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    await two.aclose()


async def test_a_writer_that_appended_after_a_load_makes_a_second_reopen_fail(store):
    async with agent_on(store, sums("a")):
        pass
    loaded = await store.load("s1")
    other = await Agent.resume(
        store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add])
    )
    await other.prompt(UserMessage("u1", "go"))
    await other.aclose()
    # ``loaded`` is stale: appending after it would repeat seq numbers
    with pytest.raises(SessionChangedError, match="load it again"):
        writer = store.reopen(loaded)
        ledger = Ledger(writer, len(loaded.records))
        ledger.turn_started(1, 0)
        await ledger.aclose()  # SQLite finds out at its first insert
    # Agent.resume loads again by itself: nothing lost
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert len(resumed.messages) == 5
    await resumed.aclose()


async def test_a_resume_that_loses_the_race_to_a_closing_writer_loads_again(store, monkeypatch):
    async with agent_on(store, sums("a")):
        pass
    real_load = type(store).load
    loads = []

    async def load_then_someone_writes(self, session_id):
        loaded = await real_load(self, session_id)
        loads.append(len(loaded.records))
        if len(loads) == 1:  # between this load and the reopen, another writer works
            other = await Agent.resume(
                store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add])
            )
            await other.prompt(UserMessage("u1", "go"))
            await other.aclose()
        return loaded

    monkeypatch.setattr(type(store), "load", load_then_someone_writes)
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    monkeypatch.undo()
    assert loads[0] < loads[-1] and len(resumed.messages) == 5
    await resumed.aclose()
    assert derive(await records_of(store)).turns == 1


# --------------------------------------------------------- 2. partial writes


async def test_a_short_write_leaves_no_half_line_and_the_session_loads(tmp_path, monkeypatch):
    store = JsonlStore(tmp_path)
    agent = agent_on(store, sums())
    real_write = os.write
    state = {"short": False, "full": False}

    def short_then_full(fd, data):
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        if b'"tool/result"' in bytes(data):  # half of the record fits, then the disk is full
            state["full"] = True
            return real_write(fd, bytes(data)[: len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(_jsonl.os, "write", short_then_full)
    with pytest.raises(LedgerError, match="No space left"):
        await agent.prompt(UserMessage("u1", "go"))
    monkeypatch.undo()
    assert state["full"]
    data = store.path("s1").read_bytes()
    assert data.endswith(b"\n")  # cut back to the last whole record
    loaded = parse_jsonl("s1", data)
    assert loaded.warnings == ()
    derive(loaded.records)
    # the broken writer writes nothing more, even with space back...
    with pytest.raises(LedgerError, match="writes nothing more"):
        await agent.prompt(UserMessage("u2", "more"))
    assert store.path("s1").read_bytes() == data
    # ...and let its lock go: a resume goes on from what was stored
    resumed = await Agent.resume(
        store, "s1", model=ScriptedModel([scripted_response("n1", "on")]), tools=ToolRegistry([add])
    )
    assert [code for _, code in resumed.closed_on_resume] == [
        TOOL_OUTCOME_UNKNOWN,
        "TOOL_NOT_STARTED",
    ]
    result = await resumed.prompt(UserMessage("u3", "go on"))
    assert result.final_text == "on"
    await resumed.aclose()
    assert derive((await store.load("s1")).records).closed
    with pytest.raises(LedgerError):
        await agent.aclose()  # the broken writer still closes (and says why it failed)


async def test_a_write_that_makes_no_progress_is_a_full_disk_not_a_hang(tmp_path, monkeypatch):
    store = JsonlStore(tmp_path)
    agent = agent_on(store, sums())
    await agent._state.open()  # its ledger, created now rather than by the turn below
    calls = []

    def no_progress(fd, data):
        calls.append(fd)
        assert len(calls) < 100, "the writer looped on a write that made no progress"
        return 0

    monkeypatch.setattr(_jsonl.os, "write", no_progress)
    with pytest.raises(LedgerError, match="no progress"):
        await agent.prompt(UserMessage("u1", "go"))
    monkeypatch.undo()
    derive((await store.load("s1")).records)


async def test_a_real_full_disk_loses_no_session_and_both_stores_work_once_space_is_back(
    tmp_path,
):
    # A tmpfs of 2 MiB per store, filled mid-session, in a mount namespace of the
    # child's own: as root, or as a user where user namespaces are allowed.
    child = SUPPORT / "full_disk_child.py"
    as_root = [] if os.geteuid() == 0 else ["--map-root-user"]
    done = await trio.run_process(
        ["unshare", "--mount", *as_root, sys.executable, str(child), str(tmp_path)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    reports = json.loads(done.stdout)
    assert reports["jsonl"]["failed"].endswith("[Errno 28] No space left on device")
    assert reports["sqlite"]["failed"].endswith("database or disk is full")
    for kind, report in reports.items():
        assert report["first"] == "completed", kind
        assert report["loads_while_full"] >= 1 and report["torn_while_full"] == [], kind
        assert report["broken_writer_wrote"] is False, kind  # no half turn appended later
        assert report["after"] == "completed" and report["final_closed"], kind


# -------------------------------------------------------- 3. SQLite failures


async def test_sqlite_disk_full_is_a_ledger_error_and_does_not_wedge_the_store(tmp_path):
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
    # SQLite rolls back by itself on a full disk, but not on a statement error such
    # as "string or blob too big": the transaction stayed open, and every later
    # flush failed with "Safety level may not be changed inside a transaction".
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
    path = tmp_path / "s.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, payload TEXT)")
    store = SqliteStore(path)
    with pytest.raises(LedgerCorruptError, match="not a trio-agent session database"):
        await store.load("s1")


async def test_sqlite_an_unopenable_path_is_a_ledger_error(tmp_path):
    store = SqliteStore(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(LedgerError, match="unable to open database file"):
        await store.load("s1")


# -------------------------------------------------------- 4. JSONL I/O errors


async def test_every_jsonl_load_failure_is_a_ledger_error_naming_session_and_path(
    tmp_path, monkeypatch
):
    store = JsonlStore(tmp_path)
    store.path("dir").mkdir()  # a directory where the ledger should be
    with pytest.raises(LedgerError, match=r"session 'dir' at .*dir\.jsonl: .*Is a directory"):
        await store.load("dir")
    for error in (
        PermissionError(errno.EACCES, "Permission denied"),
        OSError(errno.EMFILE, "Too many open files"),
    ):

        async def failing(self, *args, error=error):
            raise error

        monkeypatch.setattr(trio.Path, "read_bytes", failing)
        with pytest.raises(LedgerError, match=rf"session 's1' at .*s1\.jsonl: .*{error.strerror}"):
            await store.load("s1")
        monkeypatch.undo()


# ------------------------------------------------------ 5. records out of place


async def recorded(tmp_path, name="a", system="be brief"):
    store = JsonlStore(tmp_path / name)
    store.directory.mkdir()
    agent = agent_on(store, sums(name), system=system)
    await agent.prompt(UserMessage(f"{name}-u1", "go"))
    await agent.aclose()
    return list(await records_of(store))


def renumbered(records, start):
    return [msgspec.structs.replace(r, seq=start + i) for i, r in enumerate(records)]


async def test_two_ledgers_concatenated_are_refused(tmp_path):
    first = await recorded(tmp_path, "a", system="be brief")
    second = await recorded(tmp_path, "b", system="be verbose")
    joined = first + renumbered(second, len(first))
    with pytest.raises(LedgerCorruptError, match="a second session/start"):
        derive(parse_jsonl("s1", encode_records(joined)).records)


async def test_records_out_of_place_are_refused(tmp_path):
    records = await recorded(tmp_path)
    kinds = [r.kind for r in records]
    turn_start = records[kinds.index("turn/start")]
    step_start = kinds.index("step/start")
    result = next(r for r in records if isinstance(r, ToolResultRecord))
    cases = {
        "turn/start of turn 2 inside turn 1": [
            *records[:2],
            msgspec.structs.replace(turn_start, turn=2),
        ],
        "turn/start of turn 3 after 1": [
            *records[: kinds.index("session/closed")],
            msgspec.structs.replace(turn_start, turn=3),
        ],
        "step/start of request-001 inside request-001": [
            *records[: step_start + 1],
            records[step_start],
        ],
        "does not answer an unanswered call": [
            *records[:step_start],
            msgspec.structs.replace(
                result, result=msgspec.structs.replace(result.result, tool_call_id="nope")
            ),
        ],
        "tool/call for call 'nope', which is not an open call": [
            *records[: step_start + 2],
            ToolCallRecord(seq=0, call_id="nope"),
        ],
        "session/closed inside turn 1": [*records[: step_start + 1], records[-1]],
        "tool/call for call 'ac1', which is already dispatched": [
            *records[: step_start + 3],
            records[step_start + 2],
        ],
        "tool/cancelled for call 'ac1', which is not dispatched": [
            *records[: step_start + 2],
            ToolCancelledRecord(seq=0, call_id="ac1"),
        ],
    }
    for message, damaged in cases.items():
        with pytest.raises(LedgerCorruptError, match=message):
            derive(renumbered(damaged, 0))


async def test_recorded_arguments_over_the_limits_are_refused_when_derived(tmp_path):
    records = await recorded(tmp_path)
    big = {f"k{i}": i for i in range(MAX_ARGUMENT_ENTRIES + 1)}
    message = AssistantMessage("message-big", (TextBlock("x"), ToolCall("big", "add", big)))
    at = [r.kind for r in records].index("step/start") + 1
    damaged = [*records[:at], MessageRecord(seq=0, message=message)]
    # found by derive as damage, not later by Agent.resume as a TranscriptError
    with pytest.raises(LedgerCorruptError, match="more than 256 object fields"):
        derive(renumbered(damaged, 0))


# ------------------------------------------------- 6. stored before acting


async def test_sqlite_stores_step_start_before_the_model_is_called(tmp_path):
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


# ------------------------------------------------------ 7. session/closed


async def test_a_clean_close_can_be_told_from_a_crash(tmp_path):
    store = JsonlStore(tmp_path)
    agent = agent_on(store, sums())
    await agent.prompt(UserMessage("u1", "go"))
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()
    shutil.copy(store.path("s1"), crashed.path("s1"))  # the file as a kill -9 leaves it
    await agent.aclose()
    assert (await records_of(store))[-1].kind == "session/closed"
    clean = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert clean.resume_warnings == ()
    died = await Agent.resume(crashed, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert any("did not close the session" in w for w in died.resume_warnings)
    await clean.aclose()
    await died.aclose()


# --------------------------------------------------- 8. event numbering


async def test_event_numbers_never_repeat_after_a_crash_resume(tmp_path):
    store = JsonlStore(tmp_path)
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()
    chunks = 800  # three steps of 800 chunks: the writer renews its reservation twice
    script = [
        scripted_response(
            f"r{i}",
            [TextBlock("x" * chunks), call("add", f"c{i}", {"left": i, "right": 1})],
            text_chunks=chunks,
        )
        for i in range(3)
    ]
    script.append(scripted_response("r3", "the end", hang_at=0))
    agent = agent_on(store, script)
    seen = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            seen.append(event.sequence)
            if event.type == "tool.finished" and event.call.id == "c2":
                await trio.sleep(0.01)  # the last stream hangs: the process "dies" now
                shutil.copy(store.path("s1"), crashed.path("s1"))
                run.cancel()
    await agent.aclose()
    assert max(seen) > 2 * SEQUENCE_BLOCK
    resumed = await Agent.resume(
        crashed,
        "s1",
        model=ScriptedModel([scripted_response("n", "on")]),
        tools=ToolRegistry([add]),
    )
    later = []
    async with resumed.turn(UserMessage("u2", "again")) as run:
        async for event in run:
            later.append(event.sequence)
    await resumed.aclose()
    assert min(later) > max(seen)  # a consumer of both processes sees no number twice
    assert min(later) <= max(seen) + SEQUENCE_BLOCK + 1  # and the gap is bounded
    assert later == list(range(later[0], later[0] + len(later)))


async def test_event_numbers_continue_exactly_after_a_clean_close(store):
    agent = agent_on(store, sums("a"))
    first = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        first = [event.sequence async for event in run]
    await agent.aclose()
    resumed = await Agent.resume(
        store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add])
    )
    async with resumed.turn(UserMessage("u2", "again")) as run:
        second = [event.sequence async for event in run]
    await resumed.aclose()
    assert second[0] == first[-1] + 1


# -------------------------------------------------------------- 9. usage


async def test_usage_of_a_cancelled_turn_is_in_the_ledger(store):
    release = trio.Event()

    @tool
    async def slow() -> str:
        await release.wait()
        return "never"

    script = [scripted_response("r1", [call("slow", "c1")], usage=Usage(100, 20))]
    agent = agent_on(store, script, tools=ToolRegistry([slow]))
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()  # the response completed (and was billed); the step did not
    await agent.aclose()
    derived = derive(await records_of(store))
    assert (derived.usage.input_tokens, derived.usage.output_tokens) == (100, 20)


async def test_usage_of_a_refused_response_is_counted_on_its_own(store):
    # a response for another request: a protocol error, but the provider billed it
    refused = scripted_response("r1", "hi", usage=Usage(50, 5), request_id="request-009")
    agent = agent_on(store, [refused])
    result = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert result.end.code == "MODEL_PROTOCOL_ERROR"
    derived = derive(await records_of(store))
    assert derived.usage == Usage() and derived.failed_usage == Usage(50, 5)


# ---------------------------------------------- 10. how a call without result ended


async def test_a_fatal_call_is_not_later_called_outcome_unknown(store):
    @tool
    async def boom() -> str:
        raise FatalToolError("the quota is gone")

    agent = agent_on(
        store, [scripted_response("r1", [call("boom", "c1")])], tools=ToolRegistry([boom])
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == TOOL_FATAL
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([boom]))
    [(closing, code)] = resumed.closed_on_resume
    assert code == TOOL_FATAL and "the quota is gone" in closing.content
    await resumed.aclose()


async def test_a_cancelled_call_is_not_later_called_outcome_unknown(store):
    @tool
    async def slow() -> str:
        await trio.sleep_forever()
        return "never"

    agent = agent_on(
        store, [scripted_response("r1", [call("slow", "c1")])], tools=ToolRegistry([slow])
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                await trio.sleep(0.01)  # the call runs, then is cancelled
                run.cancel()
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([slow]))
    [(closing, code)] = resumed.closed_on_resume
    assert code == TOOL_CANCELLED and closing.content.startswith("TOOL_CANCELLED:")
    await resumed.aclose()


async def test_a_call_running_when_the_process_died_is_still_outcome_unknown(tmp_path):
    store = JsonlStore(tmp_path)
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()

    @tool
    async def slow() -> str:
        shutil.copy(store.path("s1"), crashed.path("s1"))  # killed while it runs
        await trio.sleep_forever()
        return "never"

    agent = agent_on(
        store, [scripted_response("r1", [call("slow", "c1")])], tools=ToolRegistry([slow])
    )
    with trio.move_on_after(0.05):
        await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    resumed = await Agent.resume(crashed, "s1", model=ScriptedModel([]), tools=ToolRegistry([slow]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_OUTCOME_UNKNOWN]
    await resumed.aclose()


# ------------------------------------------------------ 11. fsync threads


def fsync_threads() -> int:
    return sum(t.name == "trio-agent-fsync" for t in threading.enumerate())


async def test_many_open_ledgers_share_a_few_fsync_threads(tmp_path):
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


# ---------------------------------------------------------- extras


async def test_derive_reads_usage_from_step_end_in_older_ledgers():
    records = [
        SessionStartRecord(seq=0, format=1, session_id="s", created=0.0),
        TurnStartRecord(seq=1, turn=1, sequence=0),
        *map(
            record_decoder.decode,
            [
                b'{"kind":"step/start","seq":2,"request_id":"request-001"}',
                b'{"kind":"message","seq":3,"message":{"role":"assistant","id":"m","content":[]}}',
                b'{"kind":"step/end","seq":4,"request_id":"request-001","stop_reason":"stop",'
                b'"usage":{"input_tokens":7,"output_tokens":3}}',
            ],
        ),
    ]
    assert derive(records).usage == Usage(7, 3)


async def test_a_turn_cut_short_by_keyboard_interrupt_still_closes_to_a_loadable_ledger(store):
    # KeyboardInterrupt is neither an Exception nor cancellation: the turn gets no
    # turn/end of its own, and session/closed inside an open turn would be damage.
    class Interrupting(ScriptedModel):
        def stream(self, request):
            raise KeyboardInterrupt

    agent = Agent(model=Interrupting([]), store=store, session_id="s1")
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    records = await records_of(store)
    assert [r.kind for r in records][-2:] == ["turn/end", "session/closed"]
    assert records[-2].end.reason == "interrupted"
    assert derive(records).closed


# ------------------------------------------------- found by the review of issue 12


async def test_a_turn_after_a_caught_keyboard_interrupt_keeps_the_ledger_loadable(store):
    # A REPL catches Ctrl-C and goes on: the cut turn had no turn/end, and the next
    # turn/start inside it made the whole session unloadable.
    class InterruptingOnce(ScriptedModel):
        calls = 0

        def stream(self, request):
            InterruptingOnce.calls += 1
            if InterruptingOnce.calls == 1:
                raise KeyboardInterrupt
            return super().stream(request)

    agent = Agent(
        model=InterruptingOnce([scripted_response("r1", "fine")]), store=store, session_id="s1"
    )
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt(UserMessage("u1", "go"))
    assert (await agent.prompt(UserMessage("u2", "again"))).final_text == "fine"
    await agent.aclose()
    records = await records_of(store)
    ends = [r.end.reason for r in records if r.kind == "turn/end"]
    assert ends == ["interrupted", "completed"] and derive(records).closed


async def test_a_call_id_used_again_after_compaction_keeps_the_ledger_loadable(store):
    # Compaction forgets the ids of what it dropped (live, and in derive): a server
    # that numbers its calls from 1 again gives the same id to a new call.
    async def compact(messages):
        return [UserMessage("summary", "we added 1 and 2")]

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
                scripted_response("r2", "3"),
                scripted_response("r3", [call("add", "c1", {"left": 3, "right": 4})]),
                scripted_response("r4", "7"),
            ]
        ),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        context_window=100,
        reserve_output_tokens=0,
        count_tokens=lambda request: 10_000 if len(request.messages) > 4 else 1,
        compact=compact,
    )
    await agent.prompt(UserMessage("u1", "1+2"))
    assert (await agent.prompt(UserMessage("u2", "3+4"))).final_text == "7"
    await agent.aclose()
    assert derive(await records_of(store)).closed


async def test_every_ledger_write_is_protected_from_keyboard_interrupt(tmp_path):
    # trio delivers Ctrl-C at any bytecode of unprotected code: between a record's
    # write and its seq being counted, the next record repeated the seq.
    seen = []

    class Watching:
        def append(self, line):
            seen.append(trio.lowlevel.currently_ki_protected())

        def commit(self): ...
        async def flush(self, durable): ...
        async def aclose(self): ...

    ledger = Ledger(Watching(), 0)
    ledger.session_started("s", 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(UserMessage("u1", "hi"), usage=Usage(1, 1))
    ledger.step_started("request-001")
    await ledger.before_event(0)
    ledger.turn_ended(1, derive_end(), 2)
    ledger.session_closed(2)
    assert seen and all(seen), seen

    class Journal:
        def message(self, message, code=None, usage=None):
            seen.append(trio.lowlevel.currently_ki_protected())

    from trio_agent.engine import Conversation

    conversation = Conversation.from_messages(())
    conversation.journal = Journal()
    seen.clear()
    conversation.append(UserMessage("u2", "in the transcript and the journal, or neither"))
    assert seen == [True]


def derive_end():
    from trio_agent import TurnCompleted

    return TurnCompleted()


async def test_a_fatal_tool_error_naming_a_file_that_is_not_utf8_is_recorded(store):
    @tool
    async def read(path: str) -> str:
        name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.listdir gives it
        raise FatalToolError(f"cannot read {name}: disk gone")

    agent = agent_on(
        store,
        [scripted_response("r1", [call("read", "c1", {"path": "x"})])],
        tools=ToolRegistry([read]),
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert result.end.code == TOOL_FATAL and "caf\ufffd.txt" in result.end.detail
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([read]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_FATAL]
    await resumed.aclose()


async def test_results_kept_after_a_fatal_call_survive_a_cancel_in_after_tool_call(store):
    @tool
    async def boom() -> str:
        await trio.sleep(0.01)
        raise FatalToolError("boom")

    @tool
    async def quick(n: int) -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.02)
        return f"quick {n}"

    in_hook = trio.Event()

    async def audit(c, result):
        in_hook.set()
        await trio.sleep_forever()

    calls = [call("boom", "c1"), call("quick", "c2", {"n": 2}), call("quick", "c3", {"n": 3})]
    agent = agent_on(
        store,
        [scripted_response("r1", calls)],
        tools=ToolRegistry([boom, quick]),
        after_tool_call=audit,
        tool_execution="parallel",
        tool_grace_period=1.0,
    )
    async with agent.turn(UserMessage("u1", "go")) as run, trio.open_nursery() as nursery:

        async def cancel_in_hook():
            await in_hook.wait()
            run.cancel()

        nursery.start_soon(cancel_in_hook)
        async for _ in run:
            pass
    await agent.aclose()
    # c2 and c3 both ran to the end: both results are kept, none is "outcome unknown"
    assert {m.content for m in agent.messages if m.id.startswith("tool-result-")} == {
        "quick 2",
        "quick 3",
    }
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([boom]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_FATAL]
    await resumed.aclose()


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def test_a_stale_load_is_refused_even_when_the_size_came_back_by_chance(tmp_path):
    store = JsonlStore(tmp_path)
    first = agent_on(store, [scripted_response("r1", "one")])
    await first.prompt(UserMessage("u1", "go"))
    await first.aclose()
    path = store.path("s1")
    # its writer died before closing it (so the resume below closes it)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    records = await records_of(store)
    closed = b'{"kind":"session/closed","seq":%d,"sequence":%d}\n' % (
        len(records),
        derive(records).sequence,
    )
    append_bytes(path, b"x" * len(closed))  # a torn tail exactly as long as B's next line
    stale = await store.load("s1")
    other = await Agent.resume(store, "s1", model=ScriptedModel([]))  # cuts the tail...
    await other.aclose()  # ...and writes a line of that very size
    assert path.stat().st_size == stale.size
    with pytest.raises(SessionChangedError):
        store.reopen(stale)
    assert (await records_of(store))[-1].kind == "session/closed"


async def test_closing_a_file_whose_fsync_waits_in_the_queue_wakes_its_waiter(
    tmp_path, monkeypatch
):
    from trio_agent.stores import _fsync

    real = os.fsync

    def slow(fd):
        import time

        time.sleep(0.2)
        real(fd)

    monkeypatch.setattr(_fsync.os, "fsync", slow)
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
        await trio.sleep(0.02)
        target.written += 1
        nursery.start_soon(waiter)
        await trio.sleep(0.01)
        await trio.to_thread.run_sync(target.close)
        with trio.fail_after(3):
            await told.wait()
    assert outcome == ["closed"]  # told, not left waiting forever
    for file in files:
        os.close(file.fd)


async def test_sqlite_creating_a_session_never_waits_on_a_busy_database(tmp_path):
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
        assert trio.current_time() - started < 1  # SQLite's busy wait is 5 s
        other.execute("COMMIT")
        other.close()
        # the first records went with the first flush instead; nothing is lost
        assert (await agent.prompt(UserMessage("u1", "go"))).final_text == "ok"
    assert [r.kind for r in await records_of(store)][:2] == ["session/start", "turn/start"]
    await store.aclose()


@pytest.mark.parametrize("mode", ["fsync", "lock"])
async def test_a_process_that_forks_keeps_fsyncing_and_lets_its_locks_go(tmp_path, mode):
    child = SUPPORT / "fork_child.py"
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, str(child), str(tmp_path), mode], capture_stdout=True, check=False
        )
    lines = done.stdout.decode().splitlines()
    if mode == "fsync":  # the child's pool had no thread: its fsync never ran
        assert lines == ["parent completed", "child completed"], lines
    else:  # a forked child kept the SQLite lock file open, and the lock with it
        assert lines == ["resumed after aclose"], lines
