"""``trio-agent fork``: a new session from a recorded one's history through a turn,
in the same store or another, the source untouched; a turn not there or a taken
id said so, with nothing written."""

from __future__ import annotations

from pathlib import Path

import trio

from trio_agent import Agent, JsonlStore, SqliteStore
from trio_agent.cli import main
from trio_agent.ledger import derive
from trio_agent.testing import ScriptedModel, scripted_response


def two_turns(directory: Path) -> Path:
    async def record() -> None:
        model = ScriptedModel([scripted_response("r1", "a"), scripted_response("r2", "b")])
        agent = Agent(model=model, store=JsonlStore(directory), session_id="one")
        await agent.prompt("x")
        await agent.prompt("y")
        await agent.aclose()

    trio.run(record)
    return directory / "one.jsonl"


def turns_of(store, session_id: str) -> int:
    async def load() -> int:
        try:
            return derive((await store.load(session_id)).records).turns
        finally:
            close = getattr(store, "aclose", None)
            if close is not None:
                await close()

    return trio.run(load)


def test_fork_a_ledger_into_its_store_and_into_a_sqlite_database(tmp_path, capsys):
    ledger = two_turns(tmp_path / "src")
    before = ledger.read_bytes()
    assert main(["fork", str(ledger), "--at-turn", "1", "--new-id", "two"]) == 0
    out = capsys.readouterr().out
    assert "forked one at turn 1 into two" in out
    assert f"trio-agent resume {tmp_path / 'src' / 'two.jsonl'}" in out
    assert turns_of(JsonlStore(tmp_path / "src"), "two") == 1
    database = tmp_path / "sessions.db"
    argv = ["fork", "one", "--store", str(tmp_path / "src"), "--at-turn", "2"]
    assert main([*argv, "--to-store", str(database), "--new-id", "three"]) == 0
    assert turns_of(SqliteStore(database), "three") == 2
    assert ledger.read_bytes() == before


def test_fork_of_a_turn_not_there_or_onto_a_taken_id_fails_and_writes_nothing(tmp_path, capsys):
    ledger = two_turns(tmp_path)
    assert main(["fork", str(ledger), "--at-turn", "3", "--new-id", "x"]) == 1
    assert "cannot fork session 'one' at turn 3: it has 2 turns" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
    assert main(["fork", str(ledger), "--at-turn", "1", "--new-id", "one"]) == 2
    assert "onto itself" in capsys.readouterr().err
    assert main(["fork", str(tmp_path / "nope.jsonl"), "--at-turn", "1"]) == 2
    assert "no ledger at" in capsys.readouterr().err
    assert main(["fork", str(ledger), "--at-turn", "-1"]) == 2
    assert "--at-turn must be 0 or more" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl"]
