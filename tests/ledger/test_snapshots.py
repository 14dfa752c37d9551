"""Snapshots in stored sessions (issue 38): the ledger writes them by the store's
policy after a turn's end, keeps every record, and a resume replays from the
last one; a damaged or torn snapshot falls back, with a warning."""

from __future__ import annotations

import logging

import attrs
import pytest

from trio_agent import Agent, JsonlStore, SqliteStore
from trio_agent.ledger import DerivedSession, SnapshotRecord, TurnEndRecord, derive
from trio_agent.stores import SnapshotPolicy
from trio_agent.testing import CallableModel, scripted_response


def _answer(request):
    return scripted_response(f"r-{request.id}", f"answer to {request.messages[-1].id}")


def same(left: DerivedSession, right: DerivedSession) -> None:
    for field in attrs.fields(DerivedSession):
        if field.name != "conversation":
            assert getattr(left, field.name) == getattr(right, field.name), field.name


def make_store(kind: str, tmp_path, request, **options):
    if kind == "jsonl":
        return JsonlStore(tmp_path, **options)
    if kind == "postgres":
        return request.getfixturevalue("pg_store")(**options)
    return SqliteStore(tmp_path / "sessions.db", **options)


async def write_session(store, turns: int, session_id: str = "s") -> None:
    agent = Agent(
        model=CallableModel(_answer, record_requests=False),
        store=store,
        session_id=session_id,
        fsync="never",
    )
    for turn in range(turns):
        await agent.prompt(f"turn {turn}")
    await agent.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_a_stored_session_writes_snapshots_and_keeps_every_record(tmp_path, kind, request):
    store = make_store(kind, tmp_path, request, snapshots=SnapshotPolicy(every_turns=2))
    await write_session(store, 7)
    records = (await store.load("s")).records
    at = [i for i, r in enumerate(records) if type(r) is SnapshotRecord]
    assert len(at) >= 2, [r.kind for r in records]
    assert all(type(records[i - 1]) is TurnEndRecord for i in at)  # right after a turn's end
    assert sum(r.kind == "turn/start" for r in records) == 7  # history is all there
    tail = await store.load_tail("s")
    assert tail.records == records[at[-1] :]
    same(derive(tail.records), derive(records))
    resumed = await Agent.resume(store, "s", model=CallableModel(_answer))
    assert list(resumed.messages) == derive(records).messages and resumed.resume_warnings == ()
    result = await resumed.prompt("one more")  # and it goes on writing snapshots
    await resumed.aclose()
    again = (await store.load("s")).records
    assert [r.seq for r in again] == list(range(len(again)))
    same(derive((await store.load_tail("s")).records), derive(again))
    assert list(derive(again).messages) == list(result.messages)


async def test_no_snapshots_when_the_store_says_none(tmp_path):
    store = JsonlStore(tmp_path, snapshots=None)
    await write_session(store, 5)
    assert not any(type(r) is SnapshotRecord for r in (await store.load("s")).records)


async def test_a_damaged_snapshot_falls_back_to_the_whole_ledger_with_a_warning(tmp_path, caplog):
    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=1))
    await write_session(store, 3)
    path = store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    end = data.index(b"\n", start)
    line = data[start:end]
    # valid JSON, but a state that does not hold together (it names the wrong record)
    damaged = line.replace(b'"next_seq":', b'"next_seq":1', 1)
    path.write_bytes(data[:start] + damaged + data[end:])
    whole = derive((await store.load("s")).records)
    with caplog.at_level(logging.WARNING, "trio_agent.ledger"):
        agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    assert any("the whole ledger was replayed" in w for w in agent.resume_warnings)
    assert "the whole ledger was replayed" in caplog.text
    assert list(agent.messages) == whole.messages
    await agent.aclose()
    # a snapshot line that is not even JSON: the whole ledger loads around it
    path.write_bytes(data[:start] + line[:40] + b"}}}" + data[end:])
    loaded = await store.load("s")
    assert any("snapshot" in w and "damaged" in w for w in loaded.warnings)
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    assert any("the whole ledger was replayed" in w for w in agent.resume_warnings)
    assert list(agent.messages) == whole.messages
    await agent.aclose()


async def test_a_snapshot_torn_by_a_crash_resumes_from_the_one_before(tmp_path):
    """A writer killed while writing a snapshot leaves its line torn: the resume
    reads from the snapshot before (or the start), ignoring the torn line."""
    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=1))
    await write_session(store, 3)
    path = store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    path.write_bytes(data[: start + 30])  # killed 30 bytes into the last snapshot
    tail = await store.load_tail("s")
    assert type(tail.records[0]) is SnapshotRecord and tail.warnings
    assert tail.records[-1].kind == "turn/end"
    full = await store.load("s")
    same(derive(tail.records), derive(full.records))
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    assert list(agent.messages) == derive(full.records).messages
    await agent.prompt("again")
    await agent.aclose()
    assert (await store.load("s")).warnings == ()  # the torn line was cut off


async def test_fork_and_show_see_every_turn_before_a_snapshot(tmp_path, capsys):
    from trio_agent.cli import main

    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=1))
    await write_session(store, 4)
    forked = await Agent.fork(store, "s", at_turn=1, new_session_id="f")
    agent = await Agent.resume(store, forked, model=CallableModel(_answer))
    assert [m.content for m in agent.messages if m.role == "user"] == ["turn 0"]
    await agent.aclose()
    assert main(["show", str(store.path("s"))]) == 0
    shown = capsys.readouterr().out
    assert all(f"== turn {turn} ended" in shown for turn in range(1, 5)), shown
    assert "snapshot" not in shown  # bookkeeping, as events/reserved


async def test_a_fork_past_a_snapshot_is_its_own_session():
    """A fork copied the source's snapshots, which name the source: resumed from
    one, the fork derived the source's session id. It leaves them out."""
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        store = JsonlStore(where, snapshots=SnapshotPolicy(every_turns=1))
        await write_session(store, 4)
        forked = await Agent.fork(store, "s", at_turn=3, new_session_id="f")
        records = (await store.load(forked)).records
        assert [r.seq for r in records] == list(range(len(records)))
        assert sum(r.kind == "turn/end" for r in records) == 3
        derived = derive((await store.load_tail(forked)).records)
        assert derived.session_id == "f" and derived.turns == 3
        agent = await Agent.resume(store, forked, model=CallableModel(_answer))
        await agent.prompt("on the fork")
        await agent.aclose()
        tail = (await store.load_tail(forked)).records
        assert tail[0].kind == "snapshot" and derive(tail).session_id == "f"
