"""What every store does: makes its directory on first use and nothing on a load (issue
14), says how to continue a session that exists, refuses to reopen a stale load, and
loses no session on a real full disk (issue 12)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import trio
from helpers import add
from ledger_scenario import agent_on, ok_model, sums
from paths import SUPPORT
from store_kinds import close_store, make_store

from trio_agent import (
    Agent,
    JsonlStore,
    LedgerError,
    SessionChangedError,
    ToolRegistry,
    UserMessage,
)
from trio_agent.ledger import Ledger, SessionExistsError, derive
from trio_agent.testing import ScriptedModel


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_store_in_a_directory_that_does_not_exist_makes_it_on_first_use(tmp_path, kind):
    """Issue 14: ``JsonlStore("sessions/")`` (the README's) crashed with "cannot create session
    's-42': No such file or directory"; a store makes its directory on first use."""
    where = tmp_path / "not" / "yet" / "sessions"
    store = make_store(kind, where)
    agent = Agent(model=ok_model(), store=store, session_id="s-42")
    assert not where.exists()  # nothing is made before the session is
    assert (await agent.prompt("hi")).end.reason == "completed"
    await agent.aclose()
    assert where.is_dir()
    derived = derive((await store.load("s-42")).records)
    assert derived.turns == 1 and derived.closed
    await close_store(store)


async def test_loading_from_a_missing_directory_makes_nothing(tmp_path):
    """Issue 14: loading from a missing directory makes nothing."""
    store = JsonlStore(tmp_path / "missing")
    with pytest.raises(LedgerError, match="no session 's1'"):
        await store.load("s1")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_session_that_is_not_there_is_a_session_not_found_error(tmp_path, kind):
    """Review of issue 38: a session not stored was a bare ``LedgerError``, so a
    caller (the command line's exit code) could not tell it from a ledger that
    failed. It is ``SessionNotFoundError`` (a ``LedgerError``), from every way in."""
    from trio_agent import SessionNotFoundError

    store = make_store(kind, tmp_path)
    async with Agent(model=ok_model(), store=store, session_id="there"):
        pass
    with pytest.raises(SessionNotFoundError, match="no session 'nosuch'"):
        await store.load("nosuch")
    with pytest.raises(SessionNotFoundError, match="no session 'nosuch'"):
        await store.load_tail("nosuch")
    with pytest.raises(SessionNotFoundError, match="no session 'nosuch'"):
        await Agent.resume(store, "nosuch", model=ok_model())
    assert issubclass(SessionNotFoundError, LedgerError)
    await close_store(store)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_an_existing_session_says_to_resume_it(tmp_path, kind):
    """Issue 14: an existing session's error says what to do: resume it."""
    store = make_store(kind, tmp_path)
    async with Agent(model=ok_model(), store=store, session_id="s-42"):
        pass
    again = Agent(model=ok_model(), store=store, session_id="s-42")
    with pytest.raises(SessionExistsError) as info:
        await again.prompt("hi")
    where = tmp_path if kind == "jsonl" else tmp_path / "sessions.db"
    assert str(info.value) == (
        f"session 's-42' already exists in {where}: use Agent.resume(store, 's-42') to continue it"
    )
    assert isinstance(info.value, LedgerError)
    resumed = await Agent.resume(store, "s-42", model=ok_model())  # as it says
    await resumed.aclose()
    await close_store(store)


async def test_a_writer_that_appended_after_a_load_makes_a_second_reopen_fail(store):
    """Issue 12: reopening a stale load appended after another writer's records, repeating seq
    numbers; the reopen is refused, and ``Agent.resume`` loads again by itself."""
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


async def test_a_real_full_disk_loses_no_session_and_both_stores_work_once_space_is_back(
    tmp_path,
):
    """Issue 12: A tmpfs of 2 MiB per store, filled mid-session, in a mount namespace of the child's
    own (as root, or as a user where user namespaces are allowed): no session is lost, and both
    stores work once space is back."""
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
