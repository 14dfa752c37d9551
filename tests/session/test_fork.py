"""``Agent.fork`` (DESIGN 12.4): a new session whose history is the source's
through the end of a turn, its held calls as they stood then; the source
untouched byte for byte; a turn that is not there, or an id taken, refused;
from one kind of store to another."""

from __future__ import annotations

import pytest
from store_kinds import close_store, make_store

from trio_agent import (
    Agent,
    JsonlStore,
    LedgerError,
    SessionExistsError,
    ToolCall,
    TurnAwaitingApproval,
    tool,
)
from trio_agent.ledger import TOOL_OUTCOME_UNKNOWN, derive
from trio_agent.testing import ScriptedModel, scripted_response


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def script() -> list:
    return [
        scripted_response("r1", "hello"),
        scripted_response("r2", [ToolCall("c1", "pay", {"amount": 5})]),
        scripted_response("r3", "paid"),
    ]


async def three_turns(store) -> list:
    """Turn 1 answers; turn 2 asks to pay and is held; the call is approved; turn 3
    runs it. The transcript at each turn's end."""
    agent = Agent(model=ScriptedModel(script()), tools=[pay], store=store, session_id="src")
    seen = [(await agent.prompt("hi")).messages]
    second = await agent.prompt("pay 5")
    assert isinstance(second.end, TurnAwaitingApproval)
    seen.append(second.messages)
    await agent.approve("c1", by="ann")
    seen.append((await agent.prompt()).messages)
    await agent.aclose()
    return seen


async def stored_bytes(store, session_id: str) -> list[bytes]:
    from trio_agent.ledger import encode_records

    return [encode_records([r]) for r in (await store.load(session_id)).records]


async def test_a_fork_at_each_turn_has_the_source_history_through_its_end(tmp_path):
    store = JsonlStore(tmp_path)
    seen = await three_turns(store)
    before = store.path("src").read_bytes()
    for turn in (0, 1, 2, 3):
        new = await Agent.fork(store, "src", at_turn=turn, new_session_id=f"f{turn}")
        assert new == f"f{turn}"
        derived = derive((await store.load(new)).records)
        assert derived.session_id == new and derived.turns == turn and derived.closed
        assert tuple(derived.messages) == (() if turn == 0 else seen[turn - 1])
    assert store.path("src").read_bytes() == before  # the source, byte for byte


async def test_a_fork_keeps_the_held_calls_as_they_stood_and_goes_its_own_way(tmp_path):
    """Forked at turn 2, the payment is held and undecided (its approval came
    after the turn); the fork can reject it while the source paid."""
    store = JsonlStore(tmp_path)
    await three_turns(store)
    await Agent.fork(store, "src", at_turn=2, new_session_id="other")
    model = ScriptedModel([scripted_response("o1", "not paid then")])
    fork = await Agent.resume(store, "other", model=model, tools=[pay])
    assert [c.id for c in fork.pending_approvals] == ["c1"]
    await fork.reject("c1", "too much")
    result = await fork.prompt()
    await fork.aclose()
    assert result.final_text == "not paid then"
    assert "rejected" in str(model.requests[0].messages[-1].content)
    source = derive((await store.load("src")).records)
    assert source.turns == 3 and "paid 5" in str(source.messages[-2].content)


async def test_a_fork_of_a_turn_not_there_or_onto_a_taken_id_is_refused(tmp_path):
    store = JsonlStore(tmp_path)
    await three_turns(store)
    before = store.path("src").read_bytes()
    with pytest.raises(LedgerError, match="cannot fork session 'src' at turn 4: it has 3 turns"):
        await Agent.fork(store, "src", at_turn=4, new_session_id="x")
    with pytest.raises(ValueError, match="cannot fork session 'src' onto itself"):
        await Agent.fork(store, "src", at_turn=1, new_session_id="src", to_store=store)
    await Agent.fork(store, "src", at_turn=1, new_session_id="taken")
    with pytest.raises(SessionExistsError, match="choose another new_session_id"):
        await Agent.fork(store, "src", at_turn=2, new_session_id="taken")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="at_turn must be an int >= 0"):
            await Agent.fork(store, "src", at_turn=bad, new_session_id="y")
    with pytest.raises(ValueError, match="session id"):
        await Agent.fork(store, "src", at_turn=1, new_session_id="../escape")
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "y.jsonl").exists()
    assert store.path("src").read_bytes() == before
    derived = derive((await store.load("taken")).records)
    assert derived.turns == 1  # the refused second fork changed nothing


async def test_a_turn_whose_writer_died_in_it_is_not_forked_until_resumed(tmp_path):
    store = JsonlStore(tmp_path)
    await three_turns(store)
    lines = store.path("src").read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"turn/end"' in line and b'"turn":2' in line)
    store.path("cut").write_bytes(b"".join(lines[:cut]).replace(b'"src"', b'"cut"', 1))
    with pytest.raises(LedgerError, match="turn 2: the turn has not ended"):
        await Agent.fork(store, "cut", at_turn=2, new_session_id="z")
    await Agent.fork(store, "cut", at_turn=1, new_session_id="z")  # an ended turn is fine


async def test_a_fork_never_runs_again_a_call_the_source_owes_a_rerun(tmp_path):
    """The source crashed in an idempotent call and was resumed (its rerun owed):
    a fork at that turn answers the call as outcome unknown, since its key is the
    source's."""
    store = JsonlStore(tmp_path)

    @tool(effect="idempotent")
    async def put() -> str:
        """Put."""
        return "put"

    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [ToolCall("c1", "put", {})])]),
        tools=[put],
        store=store,
        session_id="src",
    )
    await agent.prompt("go")
    await agent.aclose()
    lines = store.path("src").read_bytes().splitlines(keepends=True)
    dispatched = next(i for i, line in enumerate(lines) if b'"tool/call"' in line)
    store.path("crashed").write_bytes(
        b"".join(lines[: dispatched + 1]).replace(b'"src"', b'"crashed"', 1)
    )
    resumed = await Agent.resume(store, "crashed", model=ScriptedModel([]), tools=[put])
    assert [c.id for c in resumed.rerun_calls] == ["c1"]
    await resumed.aclose()
    await Agent.fork(store, "crashed", at_turn=1, new_session_id="fork")
    fork = await Agent.resume(store, "fork", model=ScriptedModel([]), tools=[put])
    assert fork.rerun_calls == ()
    assert [code for _, code in fork.closed_on_resume] == []  # answered by the fork itself
    last = fork.messages[-1]
    assert TOOL_OUTCOME_UNKNOWN in str(last.content)
    await fork.aclose()


@pytest.mark.parametrize(
    ("source", "target"), [("jsonl", "sqlite"), ("sqlite", "jsonl"), ("jsonl", "postgres")]
)
async def test_a_fork_goes_from_one_kind_of_store_to_another(tmp_path, request, source, target):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    origin = make_store(source, tmp_path / "a", request)
    other = make_store(target, tmp_path / "b", request)
    try:
        seen = await three_turns(origin)
        before = await stored_bytes(origin, "src")
        await Agent.fork(origin, "src", at_turn=3, new_session_id="moved", to_store=other)
        model = ScriptedModel([scripted_response("m1", "on")])
        moved = await Agent.resume(other, "moved", model=model, tools=[pay])
        assert moved.messages == seen[2] and moved.turns == 3
        await moved.prompt("more")
        await moved.aclose()
        assert await stored_bytes(origin, "src") == before
        back = JsonlStore(tmp_path / "back")
        await Agent.fork(other, "moved", at_turn=4, new_session_id="home", to_store=back)
        assert derive((await back.load("home")).records).turns == 4
    finally:
        for store in (origin, other):
            await close_store(store)


async def test_a_store_that_is_not_a_session_store_is_refused_naming_it(tmp_path):
    """``Agent(store="sessions")`` says the store must be a ``SessionStore``, but
    ``Agent.fork`` and ``Agent.resume`` given a directory name (as pydantic-ai's
    and the Agents SDK's users write a path) failed deep inside with
    ``AttributeError: 'str' object has no attribute 'load'``. Each now raises a
    ``TypeError`` naming the argument, before anything is read or written."""
    store = JsonlStore(tmp_path)
    await three_turns(store)
    with pytest.raises(TypeError, match=r"^store must be a SessionStore, got 'sessions'"):
        await Agent.fork("sessions", "src", at_turn=1, new_session_id="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^to_store must be a SessionStore, got "):
        await Agent.fork(store, "src", at_turn=1, new_session_id="x", to_store=str(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^store must be a SessionStore, got None"):
        await Agent.resume(None, "src", model=ScriptedModel([]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^store must be a SessionStore, got "):
        await Agent.resume(str(tmp_path), "src", model=ScriptedModel([]))  # type: ignore[arg-type]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["src.jsonl"]


async def test_a_fork_that_fails_to_write_leaves_no_part_of_its_session(tmp_path, monkeypatch):
    """Bug: a JSONL fork wrote its records a line at a time, so one that failed
    midway (a full disk) left the new session with part of the history: the same
    id could not be forked onto again, and a resume went on from the cut history
    as if its writer had crashed. A new session is written whole or not at all,
    and can be forked again."""
    import errno
    import os

    from trio_agent.stores import _jsonl

    store = JsonlStore(tmp_path)
    seen = await three_turns(store)
    real_write = os.write

    def full_at_turn_2(fd, data):
        if b'"kind":"turn/start","turn":2' in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(_jsonl.os, "write", full_at_turn_2)
    with pytest.raises(LedgerError, match="No space left"):
        await Agent.fork(store, "src", at_turn=3, new_session_id="f")
    monkeypatch.undo()
    assert store.path("f").read_bytes() == b""  # a session never made
    await Agent.fork(store, "src", at_turn=3, new_session_id="f")
    derived = derive((await store.load("f")).records)
    assert derived.turns == 3 and tuple(derived.messages) == seen[2]
