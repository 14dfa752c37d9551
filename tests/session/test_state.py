"""``SessionState``: what an ``Agent`` and its turns share. The session's ledger is
created on first use, never in ``Agent.__init__`` (issue 14), in a worker thread,
whole or not at all whatever cancels it, by one turn at a time; a turn that loses
the start race lets its message id go (review 14)."""

from __future__ import annotations

import threading

import pytest
import trio
from ledger_scenario import ok_model
from sessions import model, user_texts
from store_kinds import close_store, make_store

from trio_agent import Agent, JsonlStore, LedgerError, SessionLockedError, UserMessage
from trio_agent.ledger import SessionExistsError, derive
from trio_agent.stores import parse_jsonl


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_agent_init_creates_no_file_and_fixes_the_session_id_at_once(tmp_path, kind):
    """Issue 14: ``Agent.__init__`` creates no file, and fixes the session id at once."""
    store = make_store(kind, tmp_path / "store")
    named = Agent(model=ok_model(), store=store, session_id="s1")
    anonymous = Agent(model=ok_model(), store=store)
    assert named.session_id == "s1"
    assert anonymous.session_id is not None and anonymous.session_id.startswith("session-")
    assert Agent(model=ok_model()).session_id is None  # kept in memory only
    assert not (tmp_path / "store").exists()
    await anonymous.prompt("hi")  # the first turn creates it, under the id given out
    await anonymous.aclose()
    assert derive((await store.load(anonymous.session_id)).records).turns == 1
    await close_store(store)


async def test_async_with_creates_the_session_and_a_never_used_agent_creates_nothing(tmp_path):
    """Issue 14: ``async with`` creates the session; an agent never used creates nothing."""
    store = JsonlStore(tmp_path)
    unused = Agent(model=ok_model(), store=store, session_id="unused")
    await unused.aclose()
    assert not store.path("unused").exists()  # closed unused: nothing to resume
    history = [UserMessage("h1", "earlier")]
    async with Agent(model=ok_model(), store=store, session_id="s1", messages=history):
        records = parse_jsonl("s1", store.path("s1").read_bytes()).records
        assert [r.kind for r in records] == ["session/start", "message"]
    assert derive((await store.load("s1")).records).closed


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_the_store_is_worked_in_a_worker_thread_not_the_trio_thread(tmp_path, kind, request):
    """Issue 14: the store is worked in a worker thread, not the trio thread."""
    store = make_store(kind, tmp_path, request)
    threads = []
    real_create = store.create

    def create(session_id):
        threads.append(threading.current_thread())
        return real_create(session_id)

    store.create = create
    agent = Agent(model=ok_model(), store=store, session_id="s1")
    assert threads == []
    await agent.prompt("hi")
    await agent.aclose()
    assert len(threads) == 1 and threads[0] is not threading.main_thread()
    await close_store(store)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_a_locked_session_is_refused_at_first_use_and_a_later_attempt_succeeds(
    tmp_path, kind, request
):
    """Issue 14: a locked session is refused at first use, its prompt freed, and a later attempt
    succeeds."""
    store = make_store(kind, tmp_path, request)
    holder = Agent(model=ok_model(), store=store, session_id="s1")
    await holder.__aenter__()  # creates the session and keeps it open
    second = Agent(model=ok_model(), store=store, session_id="s2")
    blocked = Agent(model=ok_model("r1"), store=store, session_id="s1")  # no error here
    with pytest.raises(SessionLockedError, match="already has a writer"):
        async with blocked:
            pass
    with pytest.raises(SessionLockedError):  # the same at a first turn; its prompt is freed
        await blocked.prompt(UserMessage("u1", "hi"))
    blocked.steer(UserMessage("u1", "hi"))  # the id is not held by the failed turn
    blocked.clear_queued()
    await holder.__aexit__(None, None, None)
    # the holder closed it: now it exists, which a later attempt says, clearly
    with pytest.raises(SessionExistsError, match=r"use Agent\.resume\(store, 's1'\)"):
        await blocked.prompt("hi")
    async with second:  # another id is not affected
        assert (await second.prompt("hi")).end.reason == "completed"
    await close_store(store)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_cancelled_while_the_session_is_created_leaves_it_whole_or_not_made(
    tmp_path, kind, request
):
    """Issue 14: a turn cancelled while the session is created leaves it whole or not made."""
    store = make_store(kind, tmp_path, request)
    real_create = store.create
    entered, release = threading.Event(), threading.Event()

    def slow_create(session_id):
        entered.set()
        release.wait(5)
        return real_create(session_id)

    store.create = slow_create
    agent = Agent(model=ok_model("r1", "r2"), store=store, session_id="s1")
    with trio.CancelScope() as scope:
        scope.cancel()  # cancelled before the thread starts: nothing is made
        await agent.prompt("never")
    assert not entered.is_set() and agent.turns == 0
    scope = trio.CancelScope()

    async def cut_turn():
        with scope:
            await agent.prompt(UserMessage("u1", "cut"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cut_turn)
        await trio.to_thread.run_sync(entered.wait, 60)
        scope.cancel()  # cancelled while the thread works: it is waited for
        await trio.sleep(0.02)
        assert agent.turns == 0 and agent.running
        release.set()
    assert scope.cancelled_caught
    # the thread was waited for and its ledger taken whole: the turn began and was cut
    assert agent.turns == 1 and agent.messages[0].id == "u1"
    result = await agent.prompt("go on")  # usable, not half made
    assert result.end.reason == "completed"
    await agent.aclose()
    derived = derive((await store.load("s1")).records)
    assert derived.turns == 2 and derived.closed
    await close_store(store)


async def test_a_failed_create_leaves_nothing_usable_and_the_next_attempt_says_why(tmp_path):
    """Issue 14: a failed create leaves nothing half made, and the next attempt says why."""
    (tmp_path / "file").write_text("in the way")
    store = JsonlStore(tmp_path / "file" / "sessions")
    agent = Agent(model=ok_model(), store=store, session_id="s1")
    for _ in range(2):  # each attempt tries again, and says why it cannot
        with pytest.raises(LedgerError, match=r"cannot create session 's1' at .*Not a directory"):
            await agent.prompt("hi")
    assert agent.turns == 0 and agent.messages == () and not agent.running
    (tmp_path / "file").unlink()
    assert (await agent.prompt("hi")).end.reason == "completed"  # the cause is gone
    await agent.aclose()


async def test_a_second_turn_is_refused_while_the_first_creates_the_session(tmp_path):
    """Issue 14: a second turn is refused while the first creates the session."""
    store = JsonlStore(tmp_path)
    real_create, release = store.create, threading.Event()
    store.create = lambda session_id: (release.wait(5), real_create(session_id))[1]
    agent = Agent(model=ok_model("r1"), store=store, session_id="s1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.prompt, "first")
        await trio.testing.wait_all_tasks_blocked()
        assert agent.running
        with pytest.raises(RuntimeError, match="already running a turn"):
            await agent.prompt("second")
        release.set()
    await agent.aclose()
    assert derive((await store.load("s1")).records).turns == 1


async def test_regression_a_turn_that_lost_the_start_race_lets_its_message_id_go():
    """Review 14 (sessions and stores): a turn that lost the start race to another kept its message
    id reserved."""
    agent = Agent(model=model())
    loser = agent.turn(UserMessage("u1", "one"))
    async with agent.turn("two") as winner:
        await winner.__anext__()  # turn.started: the winner runs, held by its events
        assert agent.running
        with pytest.raises(RuntimeError, match="already running a turn"):
            await loser.wait()
        await winner.wait()
    # HEAD: TranscriptError "message id 'u1' is queued"
    result = await agent.prompt(UserMessage("u1", "one"))
    assert result.end.reason == "completed"
    assert user_texts(agent) == ["two", "one"]
