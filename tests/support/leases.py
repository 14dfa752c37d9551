"""The PostgreSQL store's leases as the database sees them, for tests that wait on
a lease instead of sleeping past it."""

from __future__ import annotations

from datetime import datetime


async def lease_expiry(store, session_id: str) -> datetime | None:
    """When ``session_id``'s lease in ``store``'s schema expires (None: no lease)."""
    sql = f'SELECT expires FROM "{store.schema}".leases WHERE session_id = %s'
    row = await store.run("look at the lease", lambda c: c.execute(sql, (session_id,)).fetchone())
    return None if row is None else row[0]


async def lease_ended(store, session_id: str) -> bool:
    """Whether no live lease holds ``session_id`` (by the database's clock)."""
    sql = f"""SELECT count(*) FROM "{store.schema}".leases
              WHERE session_id = %s AND expires >= now()"""
    row = await store.run("look at the lease", lambda c: c.execute(sql, (session_id,)).fetchone())
    return row[0] == 0
