"""Issue 14 ("the first hour of a user"), the ledger's side: stores that make their
directory, a ledger created on first use (never in ``Agent.__init__``), an
"already exists" error that says what to do, run configuration in the ledger,
a lazy ``sqlite3`` and typed records."""

from __future__ import annotations

import subprocess
import sys
import threading
import typing

import msgspec
import pytest
import trio

from trio_agent import (
    Agent,
    JsonlStore,
    LedgerError,
    PostgresStore,
    SessionLockedError,
    SqliteStore,
    UserMessage,
)
from trio_agent.ledger import (
    Record,
    SessionExistsError,
    SessionStartRecord,
    TurnStartRecord,
    derive,
    model_label,
    record_decoder,
)
from trio_agent.stores import parse_jsonl
from trio_agent.testing import ScriptedModel, scripted_response


def ok_model(*ids: str) -> ScriptedModel:
    return ScriptedModel([scripted_response(i, f"answer {i}") for i in ids or ("r1",)])


def make_store(kind: str, where, request=None):
    if kind == "postgres":  # a schema of its own in the suite's cluster
        return request.getfixturevalue("pg_store")()
    return JsonlStore(where) if kind == "jsonl" else SqliteStore(where / "sessions.db")


async def close_store(store) -> None:
    if isinstance(store, SqliteStore | PostgresStore):
        await store.aclose()


# ------------------------------------------- 1. a store makes its directory


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_store_in_a_directory_that_does_not_exist_makes_it_on_first_use(tmp_path, kind):
    # README: `JsonlStore("sessions/")` crashed with "cannot create session 's-42':
    # No such file or directory".
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
    store = JsonlStore(tmp_path / "missing")
    with pytest.raises(LedgerError, match="no session 's1'"):
        await store.load("s1")
    assert not (tmp_path / "missing").exists()


# --------------------------------- 2. nothing is created in Agent.__init__


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_agent_init_creates_no_file_and_fixes_the_session_id_at_once(tmp_path, kind):
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
        await trio.to_thread.run_sync(entered.wait, 5)
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


# ----------------------------------------- 3. "already exists" says what to do


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_an_existing_session_says_to_resume_it(tmp_path, kind):
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


# ------------------------------------------- 8. run configuration recorded


class ProviderLike:
    """A model with str ``provider`` and ``model`` attributes, as the adapters have."""

    provider = "OpenAI"

    def __init__(self) -> None:
        self.model = "gpt-test"
        self.inner = ok_model("p1")

    def stream(self, request):
        return self.inner.stream(request)


def test_a_model_label_is_provider_and_model_or_the_class_name():
    assert model_label(ProviderLike()) == "OpenAI:gpt-test"
    assert model_label(ok_model()) == "ScriptedModel"
    odd = ProviderLike()
    odd.model = 3  # not a str: the class name
    assert model_label(odd) == "ProviderLike"


async def test_metadata_and_each_turns_model_are_recorded(tmp_path):
    store = JsonlStore(tmp_path)
    config = {"provider": "openai", "model": "gpt-test", "max_steps": 8, "env": ["KEY_NAME"]}
    agent = Agent(model=ok_model("r1"), store=store, session_id="s1", metadata=config)
    config["model"] = "changed later"  # the agent keeps its own copy
    await agent.prompt("one")
    agent._state.model = ProviderLike()  # another model for the next turn
    await agent.prompt("two")
    await agent.aclose()
    records = (await store.load("s1")).records
    start = records[0]
    assert type(start) is SessionStartRecord
    assert start.metadata == {**config, "model": "gpt-test"}
    turns = [r for r in records if type(r) is TurnStartRecord]
    assert [t.model for t in turns] == ["ScriptedModel", "OpenAI:gpt-test"]
    # the public way to read it before resuming
    assert derive((await store.load("s1")).records).metadata == start.metadata
    resumed = await Agent.resume(store, "s1", model=ok_model())
    assert dict(resumed.metadata) == start.metadata
    await resumed.aclose()


def test_ledgers_without_the_new_fields_still_load():
    old = (
        b'{"kind":"session/start","seq":0,"format":1,"session_id":"s","created":0.0,'
        b'"system":"","first_request":1,"first_sequence":0}\n'
        b'{"kind":"turn/start","seq":1,"turn":1,"sequence":0}\n'
    )
    loaded = parse_jsonl("s", old)
    assert loaded.records[0].metadata == {} and loaded.records[1].model == ""
    assert derive(loaded.records).metadata == {}


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("metadata", "error", "match"),
    [
        ("provider=openai", TypeError, "metadata must be a mapping"),
        ({1: "x"}, ValueError, r"at `\$`: key 1 is not a valid str"),
        ({"k": {1, 2}}, ValueError, r"at `\$\.k`: a set is not plain JSON"),
        ({"k": [1, (2,)]}, ValueError, r"at `\$\.k\[1\]`: a tuple is not plain JSON"),
        ({"k": float("nan")}, ValueError, "not finite"),
        ({"k": 2**64}, ValueError, "64-bit range"),
        ({"k": "\ud800"}, ValueError, "not valid Unicode"),
        ({"k": _nested(40)}, ValueError, "nested deeper than 32"),
        ({"system": "x" * 70_000}, ValueError, "more than 65536"),
    ],
)
def test_metadata_must_be_plain_json(metadata, error, match):
    with pytest.raises(error, match=match):
        Agent(model=ok_model(), metadata=metadata)


def test_metadata_may_hold_a_long_system_prompt():
    # run configuration, not tool arguments: their 4096-character limit does not apply
    config = {"cli": {"system": "be careful. " * 2000, "max_tokens": None, "retries": 2}}
    assert Agent(model=ok_model(), metadata=config).metadata == config


# ------------------------------------------------ 10. import stays cheap


def test_importing_the_package_does_not_import_sqlite3(tmp_path):
    # sqlite3 is loaded when a SqliteStore is first used, not by the package, its
    # stores module, an Agent or a JSONL session.
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


# --------------------------------------------------- 11. typed records


def test_every_record_is_frozen_and_its_kind_is_a_literal_of_its_tag():
    for cls in typing.get_args(Record):
        config = cls.__struct_config__
        assert config.frozen and config.tag == cls.kind
        hint = typing.get_type_hints(cls, include_extras=True)["kind"]
        assert typing.get_origin(hint) is typing.ClassVar
        (literal,) = typing.get_args(hint)
        assert typing.get_args(literal) == (cls.kind,), cls
        assert type(record_decoder.decode(msgspec.json.encode(_one(cls)))) is cls


def _one(cls):
    """A record of ``cls`` from its required fields, zero-valued."""
    values = {"seq": 0}
    for field in msgspec.structs.fields(cls):
        if field.required and field.name != "seq":
            values[field.name] = _zero(field.type)
    return cls(**values)


def _zero(tp):
    if typing.get_origin(tp) is typing.Annotated:  # a field with its description
        return _zero(typing.get_args(tp)[0])
    origin = typing.get_origin(tp)
    if tp is int or tp is float:
        return tp(0)
    if tp is str:
        return ""
    if origin is tuple:
        return ()
    if origin in (typing.Union, type(int | str)):
        return _zero(typing.get_args(tp)[0])
    from trio_agent import ToolResultMessage, TurnCompleted

    if tp is ToolResultMessage:
        return ToolResultMessage("r", "c", "t", "x")
    if "TurnEnd" in repr(tp) or "TurnCompleted" in repr(tp):
        return TurnCompleted()
    return UserMessage("u", "x")
