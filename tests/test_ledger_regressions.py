"""Regression tests for the ledger, each named after the bug it pins."""

from __future__ import annotations

import os
import sqlite3

import pytest
import trio
from helpers import add, call

from trio_agent import (
    TOOL_NOT_STARTED,
    Agent,
    JsonlStore,
    LedgerCorruptError,
    LedgerError,
    SqliteStore,
    ToolRegistry,
    TurnCancelled,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.ledger import ToolCallRecord, ToolResultRecord, derive, record_decoder
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response


def script():
    return [
        scripted_response(
            "r1",
            [
                call("add", "c1", {"left": 1, "right": 2}),
                call("add", "c2", {"left": 3, "right": 4}),
            ],
            text_chunks=2,
        ),
        scripted_response("r2", "done", text_chunks=2),
        scripted_response("r3", "next"),
    ]


@pytest.fixture
def store(ledger_store):
    return ledger_store


async def test_a_turn_cancelled_at_any_checkpoint_leaves_a_ledger_that_derives_and_resumes(
    store,
):
    """SQLite once dropped a batch whose flush was cancelled before the worker ran it,
    leaving a seq gap; every cancel point must leave a loadable, faithful ledger."""
    state = {"n": 0}

    def scenario():
        state["n"] += 1
        state["id"] = f"k{state['n']}"
        state["agent"] = Agent(
            model=ScriptedModel(script()),
            tools=ToolRegistry([add]),
            store=store,
            session_id=state["id"],
        )
        return state["agent"].turn(UserMessage("u1", "go"))

    async def check(events, result):
        agent, session_id = state["agent"], state["id"]
        await agent.aclose()
        derived = derive((await store.load(session_id)).records)
        assert tuple(derived.messages) == agent.messages
        resumed = await Agent.resume(
            store, session_id, model=ScriptedModel(script()[2:]), tools=ToolRegistry([add])
        )
        validate_transcript(resumed.messages)
        await resumed.aclose()

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10 and report.outcomes[-1] == "completed"


async def test_a_result_is_kept_when_cancellation_lands_in_after_tool_call(store):
    sent = []

    @tool
    async def send_email(to: str) -> str:
        sent.append(to)
        return "sent"

    entered = trio.Event()

    async def slow_audit(call, result):
        entered.set()
        await trio.sleep_forever()

    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [call("send_email", "c1", {"to": "a@b"})])]),
        tools=ToolRegistry([send_email]),
        after_tool_call=slow_audit,
        store=store,
        session_id="s1",
    )
    events = []
    async with agent.turn(UserMessage("u1", "mail")) as run:
        async for event in run:
            events.append(event)
            if event.type == "tool.started":
                await entered.wait()
                run.cancel()
    assert sent == ["a@b"] and run.result.end == TurnCancelled()
    assert agent.messages[-1].content == "sent"
    assert [e.type for e in events][-2:] == ["tool.finished", "turn.finished"]
    await agent.aclose()
    records = (await store.load("s1")).records
    assert [r.result.content for r in records if isinstance(r, ToolResultRecord)] == ["sent"]


async def test_a_call_blocked_by_a_failing_hook_is_not_recorded_as_dispatched(store):
    async def broken(call):
        raise ValueError("policy service down")

    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        before_tool_call=broken,
        store=store,
        session_id="s1",
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "HOOK_ERROR"
    await agent.aclose()
    records = (await store.load("s1")).records
    assert not any(isinstance(r, ToolCallRecord) for r in records)
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert {code for _, code in resumed.closed_on_resume} == {TOOL_NOT_STARTED}
    await resumed.aclose()


async def test_resumed_counters_continue_exactly(store):
    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        request_sequence_start=10,
    )
    live_events = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            live_events.append(event)
    await agent.aclose()
    model = ScriptedModel([scripted_response("n1", "more")])
    resumed = await Agent.resume(store, "s1", model=model, tools=ToolRegistry([add]))
    assert resumed.requests == agent.requests == 11
    events = []
    async with resumed.turn(UserMessage("u2", "more")) as run:
        async for event in run:
            events.append(event)
    assert model.requests[0].id == "request-012"
    assert events[0].sequence == live_events[-1].sequence + 1
    await resumed.aclose()


async def test_an_fsync_error_fails_visibly_and_closing_does_not_hang(tmp_path, monkeypatch):
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
    with trio.fail_after(5):
        with pytest.raises(LedgerError, match="fsync failed"):
            await agent.prompt(UserMessage("u1", "go"))
        with pytest.raises(LedgerError, match="fsync failed"):
            await agent.aclose()


async def test_closing_the_ledger_while_a_turn_runs_is_refused(tmp_path):
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "x", hang_at=0)]),
        store=JsonlStore(tmp_path),
        session_id="s1",
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        await run.__anext__()
        with pytest.raises(RuntimeError, match="while a turn runs"):
            await agent.aclose()
        run.cancel()
    await agent.aclose()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"fsync": "sometimes"}, ValueError, "fsync"),
        ({"session_id": ""}, ValueError, "session id"),
        ({"session_id": "../escape"}, ValueError, "session id"),
    ],
)
def test_bad_ledger_options_are_refused_before_anything_is_created(tmp_path, options, error, match):
    with pytest.raises(error, match=match):
        Agent(model=ScriptedModel([]), store=JsonlStore(tmp_path), **options)
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_is_not_a_store_is_refused():
    with pytest.raises(TypeError, match="SessionStore"):
        Agent(model=ScriptedModel([]), store="sessions/")


async def test_a_directory_that_cannot_be_made_is_a_ledger_error(tmp_path):
    # issue 14: a missing directory is made on first use (tests/test_ledger_issue14.py);
    # one that cannot be made is a LedgerError there, naming the file.
    (tmp_path / "file").write_text("")
    store = JsonlStore(tmp_path / "file" / "missing")
    agent = Agent(model=ScriptedModel([]), store=store, session_id="s")
    with pytest.raises(LedgerError, match=r"cannot create session .s. at .*missing/s\.jsonl"):
        async with agent:
            pass


async def test_a_session_torn_in_its_first_line_can_be_created_again(tmp_path):
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


async def test_sqlite_refuses_an_existing_session_with_a_clear_error(tmp_path):
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
