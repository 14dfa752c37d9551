"""A store of each kind by name, for tests parametrized over ``jsonl``, ``sqlite``
and ``postgres`` (a schema of its own in the suite's cluster)."""

from __future__ import annotations

from trio_agent import JsonlStore, PostgresStore, SqliteStore


def make_store(kind: str, where, request=None):
    if kind == "postgres":  # a schema of its own in the suite's cluster
        return request.getfixturevalue("pg_store")()
    return JsonlStore(where) if kind == "jsonl" else SqliteStore(where / "sessions.db")


async def close_store(store) -> None:
    if isinstance(store, SqliteStore | PostgresStore):
        await store.aclose()
