"""SnapshotPolicy across processes: its counts are of the records written since
the last snapshot, whichever process wrote them."""

from __future__ import annotations

from trio_agent import Agent, JsonlStore, SqliteStore
from trio_agent.ledger import SnapshotRecord
from trio_agent.stores import SnapshotPolicy
from trio_agent.testing import CallableModel, scripted_response


def _answer(request):
    return scripted_response(f"r-{request.id}", f"answer to {request.messages[-1].id}")


async def _one_turn_per_process(store, turns: int) -> None:
    """A session taken one turn at a time, each by a new writer (``trio-agent
    resume`` does this, and so does a server that lets idle sessions go)."""
    agent = Agent(model=CallableModel(_answer), store=store, session_id="s", fsync="never")
    await agent.prompt("turn 1")
    await agent.aclose()
    for turn in range(2, turns + 1):
        agent = await Agent.resume(store, "s", model=CallableModel(_answer), fsync="never")
        await agent.prompt(f"turn {turn}")
        await agent.aclose()


async def test_turns_taken_by_successive_writers_count_toward_the_next_snapshot(tmp_path):
    """Bug: each writer's ``SnapshotTaker`` counts turns (and bytes) from zero, so a
    session whose writers take fewer than ``every_turns`` turns each (one per
    ``trio-agent resume``, or per burst on a server that releases idle sessions)
    never writes a snapshot, and every resume replays the whole ledger."""
    for store in (
        JsonlStore(tmp_path / "jsonl", snapshots=SnapshotPolicy(every_turns=3)),
        SqliteStore(tmp_path / "s.db", snapshots=SnapshotPolicy(every_turns=3)),
    ):
        await _one_turn_per_process(store, 9)
        records = (await store.load("s")).records
        snapshots = sum(type(record) is SnapshotRecord for record in records)
        assert snapshots >= 2, f"{type(store).__name__}: {snapshots} snapshots in 9 turns"


def test_a_policy_says_what_is_wrong_with_its_numbers():
    """A wrong type is a TypeError (as a store's ``snapshots=`` of a wrong type is),
    a number below 1 a ValueError; each names the setting."""
    import pytest

    for wrong in (True, 1.0, "5", None):
        with pytest.raises(TypeError, match="every_turns"):
            SnapshotPolicy(every_turns=wrong)
    for low in (0, -1):
        with pytest.raises(ValueError, match="every_bytes"):
            SnapshotPolicy(every_bytes=low)
    assert SnapshotPolicy(every_turns=1, every_bytes=10**30).every_bytes == 10**30
