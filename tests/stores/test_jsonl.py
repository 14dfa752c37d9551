"""Sessions as JSONL files (``JsonlStore``): a directory that cannot be made, torn and
damaged lines, short writes and a full disk, load failures, and a stale load (issue
12); each regression named after the behaviour it pins."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio
from helpers import add
from ledger_scenario import agent_on, records_of, sums

from trio_agent import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    JsonlStore,
    LedgerCorruptError,
    LedgerError,
    SessionChangedError,
    ToolRegistry,
    UserMessage,
)
from trio_agent.ledger import derive
from trio_agent.stores import _jsonl, parse_jsonl
from trio_agent.testing import ScriptedModel, scripted_response


async def test_a_directory_that_cannot_be_made_is_a_ledger_error(tmp_path):
    """Issue 14: a missing directory is made on first use (stores/test_base.py); one that cannot be
    made is a LedgerError there, naming the file."""
    (tmp_path / "file").write_text("")
    store = JsonlStore(tmp_path / "file" / "missing")
    agent = Agent(model=ScriptedModel([]), store=store, session_id="s")
    with pytest.raises(LedgerError, match=r"cannot create session .s. at .*missing/s\.jsonl"):
        async with agent:
            pass


async def test_a_session_torn_in_its_first_line_can_be_created_again(tmp_path):
    """A session torn in its first line could not be created again."""
    store = JsonlStore(tmp_path)
    store.path("s1").write_bytes(b'{"kind":"session/st')
    with pytest.raises(LedgerCorruptError, match="empty"):
        derive((await store.load("s1")).records)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s1"
    )
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert (await store.load("s1")).warnings == ()


async def test_a_whole_last_line_that_does_not_decode_is_damage_not_a_torn_line(tmp_path):
    """A whole last line that does not decode was cut as a torn line; it is damage, and nothing is
    cut."""
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s1"
    )
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    path = store.path("s1")
    path.write_bytes(path.read_bytes() + b'{"kind":"from/the/future","seq":99}\n')
    with pytest.raises(LedgerCorruptError, match="corrupt"):
        await store.load("s1")
    assert path.read_bytes().endswith(b'future","seq":99}\n')  # nothing was cut


async def test_a_short_write_leaves_no_half_line_and_the_session_loads(tmp_path, monkeypatch):
    """Issue 12: a short write on a full disk left half a line; the file is cut back to the last
    whole record, the broken writer writes nothing more and lets its lock go."""
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
    """Issue 12: a write that made no progress looped for ever; it is a full disk."""
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


async def test_every_jsonl_load_failure_is_a_ledger_error_naming_session_and_path(
    tmp_path, monkeypatch
):
    """Issue 12: a JSONL load failure (a directory, no permission, too many open files) came out as
    a raw OSError; it is a LedgerError naming the session and the path."""
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


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def test_a_stale_load_is_refused_even_when_the_size_came_back_by_chance(tmp_path):
    """Issue 12 (review): a stale load was taken as current when the file's size came back to the
    same by chance; it is refused."""
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


async def test_a_line_nested_past_the_decoders_depth_is_corrupt_not_a_recursion_error(tmp_path):
    """Bug: a line whose JSON nests deeper than the decoder goes (a hand edit, a hostile
    file) raised a bare ``RecursionError`` out of ``load``, ``load_tail`` and the
    resume: it is a ``LedgerCorruptError`` naming the line, as any other bad line."""
    store = JsonlStore(tmp_path)
    agent = agent_on(store, sums())
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    path = store.path("s1")
    deep = b'"metadata":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    path.write_bytes(path.read_bytes().replace(b'"metadata":{}', deep, 1))
    for load in (store.load, store.load_tail):
        with pytest.raises(LedgerCorruptError, match=r"s1: line 1 is corrupt: .*recursion"):
            await load("s1")
    with pytest.raises(LedgerCorruptError, match="line 1 is corrupt"):
        await Agent.resume(store, "s1", model=ScriptedModel([]))


async def test_a_ledger_saved_with_a_byte_order_mark_is_refused_saying_so(tmp_path):
    """Review of issue 38: a ledger an editor saved with a UTF-8 byte order mark
    failed as "line 1 is corrupt: invalid character"; the error names the mark."""
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s")
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    store.path("s").write_bytes(b"\xef\xbb\xbf" + store.path("s").read_bytes())
    with pytest.raises(LedgerCorruptError, match="line 1 begins with a UTF-8 byte order mark"):
        await store.load("s")
    with pytest.raises(LedgerCorruptError, match="byte order mark"):
        await Agent.resume(store, "s", model=ScriptedModel([]))


async def test_resuming_an_empty_ledger_names_the_session_and_how_to_start_it_again(tmp_path):
    """Review of issue 38: an empty ledger (a creation cut short) failed a resume
    with "the ledger is empty", naming neither the session nor what to do."""
    store = JsonlStore(tmp_path)
    store.path("s").write_bytes(b"")
    with pytest.raises(
        LedgerCorruptError, match=r"^s: the ledger holds no record .*session_id='s'"
    ):
        await Agent.resume(store, "s", model=ScriptedModel([]))
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s")
    assert (await agent.prompt(UserMessage("u1", "go"))).end.reason == "completed"
    await agent.aclose()
