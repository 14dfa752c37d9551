"""A served store's state of a session (``serve/_place.py``): read from the last
snapshot on, so a long session's page costs what its tail costs; a snapshot that
does not replay falls back to the whole ledger with a warning."""

from __future__ import annotations

import logging

from trio_agent import Agent, JsonlStore
from trio_agent.ledger import derive
from trio_agent.serve._place import JsonlPlace
from trio_agent.stores import SnapshotPolicy
from trio_agent.testing import CallableModel, scripted_response


def _answer(request):
    return scripted_response(f"r-{request.id}", f"answer to {request.messages[-1].id}")


async def _write(tmp_path, turns: int) -> None:
    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=2))
    agent = Agent(model=CallableModel(_answer), store=store, session_id="s", fsync="never")
    for turn in range(turns):
        await agent.prompt(f"turn {turn}")
    await agent.aclose()


async def test_the_state_of_a_session_reads_from_its_last_snapshot(tmp_path, monkeypatch):
    await _write(tmp_path, 5)
    place = JsonlPlace(tmp_path)
    whole = derive((await place.store.load("s")).records)

    async def refuse(session_id: str) -> object:
        raise AssertionError("the whole ledger was read")

    monkeypatch.setattr(place.store, "load", refuse)
    state = await place.state("s")
    assert state is not None and state.messages == whole.messages
    assert state.usage == whole.usage and state.next_seq == whole.next_seq
    assert await place.state("other") is None


async def test_a_damaged_snapshot_is_read_whole_with_a_warning(tmp_path, caplog):
    await _write(tmp_path, 5)
    place = JsonlPlace(tmp_path)
    path = place.store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    end = data.index(b"\n", start)
    damaged = data[start:end].replace(b'"next_seq":', b'"next_seq":1', 1)
    path.write_bytes(data[:start] + damaged + data[end:])
    with caplog.at_level(logging.WARNING, "trio_agent.ledger"):
        state = await place.state("s")
    assert state is not None
    assert state.messages == derive((await place.store.load("s")).records).messages
    assert "the whole ledger was replayed" in caplog.text
