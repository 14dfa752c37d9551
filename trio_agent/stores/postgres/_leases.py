"""Leases: one writer per session, fenced by an epoch.

A lease is a row ``(session_id, holder, epoch, expires)`` of the schema's
``leases`` table. Taking a session increments its epoch, and only a lease
that is free or expired can be taken (``LeaseTable.take``); many at once with
``take_many``, for a caller that picks the sessions (the fleet's claims).
A lease taken so, for a writer still to come, waits in the ``Handoff`` until
the session's writer takes it over without bumping its epoch again. The
``Heartbeat`` renews the leases of open writers from a thread of its own and
frees those let go. The statements run in the caller's transaction (the
store's ``call``); nothing here knows what the sessions are for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, final

import attrs

from ...ledger import LeaseLostError, LedgerError, SessionLockedError

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = [
    "MIN_LEASE_SECONDS",
    "RENEWALS",
    "RETRY_SECONDS",
    "Handoff",
    "Heartbeat",
    "Held",
    "Lease",
    "LeaseTable",
    "Leased",
    "Owner",
    "locking",
    "ordered",
]

RETRY_SECONDS: Final = 1.0
"""How often a lease the heartbeat could not free is tried again."""

RENEWALS: Final = 3
"""How many times the heartbeat renews a lease within its length (every
``lease_seconds / RENEWALS``): two renewals may be late or fail before it expires."""

MIN_LEASE_SECONDS: Final = 1.0
"""The shortest lease a store takes: renewed every third of a second then. A
shorter one is renewed more often than a loaded machine's thread scheduling and
a round trip to the database can keep up with, so it would expire between two
renewals, and another writer take a session whose writer is working."""


class Owner(Protocol):
    """What the heartbeat works through: the store's ``call`` (``call(what,
    function, *args)`` runs ``function(connection, *args)`` in one transaction,
    in the calling thread), its lease statements and the lease's length."""

    lease_seconds: float

    def call(self, what: str, function: Callable[..., Any], *args: Any) -> Any: ...

    def renew(
        self, connection: Connection[Any], leases: Sequence[Leased]
    ) -> dict[str, set[int]]: ...

    def free(self, connection: Connection[Any], leases: Sequence[Leased]) -> None: ...


class Leased(Protocol):
    """A lease as freeing or renewing it needs it: its session and epoch."""

    @property
    def session_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...


class Held(NamedTuple):
    """A lease by its session and epoch (what freeing it needs)."""

    session_id: str
    epoch: int


@final
@attrs.frozen
class LeaseTable:
    """The lease statements of one schema, for one holder (``label`` names the
    store in errors)."""

    schema: str
    holder: str
    seconds: float
    label: str

    def take(self, connection: Connection[Any], session_id: str, handed: int | None) -> int:
        """Take ``session_id``'s lease (free or expired; or the one handed over at
        epoch ``handed``, still ours if its epoch is): its epoch, or
        ``SessionLockedError`` naming the holder."""
        s = self.schema
        if handed is not None:
            statement = f"""UPDATE "{s}".leases SET expires = now() + make_interval(secs => %s)
                WHERE session_id = %s AND epoch = %s RETURNING epoch"""
            values: tuple[Any, ...] = (self.seconds, session_id, handed)
        else:
            statement = f"""INSERT INTO "{s}".leases AS lease
                (session_id, holder, epoch, expires)
                VALUES (%s, %s, 1, now() + make_interval(secs => %s))
                ON CONFLICT (session_id) DO UPDATE
                    SET holder = excluded.holder, epoch = lease.epoch + 1,
                        expires = excluded.expires
                    WHERE lease.expires < now()
                RETURNING epoch"""
            values = (session_id, self.holder, self.seconds)
        row = connection.execute(statement, values).fetchone()
        if row is None:
            raise self.locked(connection, session_id)
        epoch: int = row[0]
        return epoch

    def take_many(
        self, connection: Connection[Any], session_ids: Sequence[str]
    ) -> list[tuple[str, int, bool]]:
        """Take the leases of those of ``session_ids`` that are free or expired, in
        one statement; each taken with its epoch and whether it has records. Their
        rows are locked in session order (``ordered``), whatever order they are
        asked in: two claims of overlapping sessions wait for each other, never
        deadlock."""
        s = self.schema
        taken = connection.execute(
            f"""INSERT INTO "{s}".leases AS lease (session_id, holder, epoch, expires)
                SELECT wanted, %s, 1, now() + make_interval(secs => %s)
                FROM unnest(%s::text[]) AS wanted ORDER BY wanted COLLATE "C"
                ON CONFLICT (session_id) DO UPDATE
                    SET holder = excluded.holder, epoch = lease.epoch + 1,
                        expires = excluded.expires
                    WHERE lease.expires < now()
                RETURNING session_id, epoch,
                    EXISTS (SELECT 1 FROM "{s}".records AS record
                            WHERE record.session_id = lease.session_id)""",
            (self.holder, self.seconds, ordered(session_ids)),
        ).fetchall()
        return [(session_id, epoch, bool(exists)) for session_id, epoch, exists in taken]

    def locked(self, connection: Connection[Any], session_id: str) -> SessionLockedError:
        """The error for a session another writer holds, naming it."""
        row = connection.execute(
            f"""SELECT holder, ceil(extract(epoch FROM expires - now()))
                FROM "{self.schema}".leases WHERE session_id = %s""",
            (session_id,),
        ).fetchone()
        holder, left = row if row is not None else ("?", "?")
        who = "this process" if holder == self.holder else repr(holder)
        return SessionLockedError(
            f"session {session_id!r} already has a writer: {who} holds the lease on "
            f"{session_id!r} in {self.label} for {left} s more, renewed while it runs (a "
            "holder that crashed lets it go then)"
        )

    def lost(self, session_id: str, epoch: int) -> LeaseLostError:
        """The error of a writer whose lease was taken over."""
        return LeaseLostError(
            f"session {session_id!r}: this writer's lease (epoch {epoch}) in "
            f"{self.label} was taken over by another writer; it writes nothing more"
        )

    def renew(self, connection: Connection[Any], leases: Sequence[Leased]) -> dict[str, set[int]]:
        """Renew the held ``leases`` in one statement (their rows locked in session
        order: ``locking``); the epochs still held, by session. A lease freed
        meanwhile is not renewed: ``free`` clears its holder, so a renewal begun
        before the writer closed, and committed after, takes nothing back."""
        rows = connection.execute(
            f"""WITH {locking(self.schema)}
                UPDATE "{self.schema}".leases AS lease
                SET expires = now() + make_interval(secs => %s)
                FROM unnest(%s::text[], %s::bigint[]) AS held (session_id, epoch)
                WHERE lease.session_id = held.session_id AND lease.epoch = held.epoch
                  AND lease.holder = %s AND lease.session_id IN (SELECT session_id FROM locked)
                RETURNING lease.session_id, lease.epoch""",
            (
                ordered([x.session_id for x in leases]),
                self.seconds,
                [x.session_id for x in leases],
                [x.epoch for x in leases],
                self.holder,
            ),
        ).fetchall()
        kept: dict[str, set[int]] = {}
        for session_id, epoch in rows:
            kept.setdefault(session_id, set()).add(epoch)
        return kept

    def free(self, connection: Connection[Any], leases: Sequence[Leased]) -> None:
        """Let the sessions go now (their epochs stay: the next holder counts on; the
        holder is cleared, so no renewal under way renews them)."""
        connection.execute(
            f"""WITH {locking(self.schema)}
                UPDATE "{self.schema}".leases AS lease
                SET expires = now() - interval '1 second', holder = ''
                FROM unnest(%s::text[], %s::bigint[]) AS held (session_id, epoch)
                WHERE lease.session_id = held.session_id AND lease.epoch = held.epoch
                  AND lease.session_id IN (SELECT session_id FROM locked)""",
            (
                ordered([x.session_id for x in leases]),
                [x.session_id for x in leases],
                [x.epoch for x in leases],
            ),
        )

    def holder_of(self, connection: Connection[Any], session_id: str) -> str | None:
        """Who holds the session's lease now (None: nobody)."""
        row = connection.execute(
            f"""SELECT holder FROM "{self.schema}".leases
                WHERE session_id = %s AND expires >= now()""",
            (session_id,),
        ).fetchone()
        return None if row is None else str(row[0])


def locking(schema: str) -> str:
    """A ``WITH`` query ``locked`` that locks the lease rows of the sessions its
    one parameter lists, in session order: a statement that updates many lease
    rows updates only those of ``locked`` (``session_id IN (SELECT session_id
    FROM locked)``), so it takes their locks in that order, whatever the plan of
    its own join (and never deadlocks with a claim or another renewal)."""
    return f"""locked AS (
        SELECT session_id FROM "{schema}".leases WHERE session_id = ANY(%s::text[])
        ORDER BY session_id COLLATE "C" FOR UPDATE)"""


def ordered(session_ids: Sequence[str]) -> list[str]:
    """``session_ids`` once each, in the order every statement that locks many
    lease rows locks them (``COLLATE "C"``: by code point, as Python sorts), so
    that two such statements never deadlock."""
    return sorted(set(session_ids))


@final
class Handoff:
    """Leases taken for sessions whose writer is still to come, by session: their
    epochs, until the writer takes one over (``take``) or it is let go."""

    def __init__(self) -> None:
        self._epochs: dict[str, int] = {}
        self._lock = threading.Lock()

    def hand_over(self, session_id: str, epoch: int) -> None:
        """The lease of ``session_id`` at ``epoch`` waits for the session's writer."""
        with self._lock:
            self._epochs[session_id] = epoch

    def take(self, session_id: str) -> int | None:
        """The epoch handed over for ``session_id``, now taken (None: none was)."""
        with self._lock:
            return self._epochs.pop(session_id, None)

    def put_back(self, session_id: str, epoch: int) -> None:
        """A writer that failed to take a handed lease gives it back (to be let go)."""
        with self._lock:
            self._epochs.setdefault(session_id, epoch)


@final
class Lease:
    """A writer's hold on its session: the epoch its writes are fenced by.

    While it is held the heartbeat renews it; ``release()`` (``WriterState``
    calls it when the writer fails or closes) hands it back to be freed by the
    heartbeat's thread (never a database call on the trio thread). ``lost`` is
    set when the heartbeat finds it taken over."""

    __slots__ = ("epoch", "heartbeat", "held", "lost", "session_id")

    def __init__(self, heartbeat: Heartbeat, session_id: str, epoch: int) -> None:
        self.heartbeat = heartbeat
        self.session_id = session_id
        self.epoch = epoch
        self.held = True
        self.lost = False
        heartbeat.hold(self)

    def release(self) -> None:
        if self.held:
            self.held = False
            self.heartbeat.let_go(self)


@final
class Heartbeat:
    """Renews the held leases from a thread of its own, every third of the lease's
    length, in one statement; marks a lease taken over as ``lost``; frees the
    leases let go. A free that fails (the database away) is tried again every
    ``RETRY_SECONDS`` until the lease would have expired by itself. Runs while a
    lease is held or waits to be freed, and ends by itself after (a daemon
    thread: it never keeps a process alive). Its statements are short and
    bounded by the connection's timeouts."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self._held: set[Lease] = set()
        self._holding: dict[str, Lease] = {}  # the lease last held for each session
        self._freed: list[tuple[Leased, float]] = []  # with when to stop trying
        self._stops = 0  # how many times ``stop`` was called
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._held.add(lease)
            self._holding[lease.session_id] = lease
            self._start()

    def holding(self, session_id: str) -> Lease | None:
        """The lease an open writer of this store holds on ``session_id`` (None:
        none), for what else is fenced by it (the served events)."""
        with self._lock:
            return self._holding.get(session_id)

    def let_go(self, lease: Leased) -> None:
        until = time.monotonic() + self._owner.lease_seconds  # expired by then anyway
        with self._lock:
            if self._holding.get(lease.session_id) is lease:
                del self._holding[lease.session_id]
            self._held.discard(lease)
            self._freed.append((lease, until))
            self._start()
        self._wake.set()

    def stop(self) -> None:
        """Renew and free nothing more (the store is closed: its leases expire)."""
        with self._lock:
            self._held.clear()
            self._holding.clear()
            self._freed.clear()
            self._stops += 1
        self._wake.set()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="trio-agent postgres heartbeat", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        owner = self._owner
        interval = owner.lease_seconds / RENEWALS
        while True:
            with self._lock:
                held, freed, self._freed = list(self._held), self._freed, []
                stops = self._stops
                if not held and not freed:
                    self._thread = None
                    return
            wait = interval
            if freed and not self._free(freed, stops):
                wait = min(interval, RETRY_SECONDS)
            if held:
                try:
                    kept = owner.call("renew leases", owner.renew, held)
                except LedgerError:
                    pass  # the next flush says what is wrong; the lease may still be renewed
                else:
                    for lease in held:
                        if lease.epoch not in kept.get(lease.session_id, ()):
                            lease.lost = True
            self._wake.wait(wait)
            self._wake.clear()

    def _free(self, freed: list[tuple[Leased, float]], stops: int) -> bool:
        """Free ``freed``; whether it was done. Not done, the leases that have not
        expired by themselves yet wait to be freed again (unless the store was
        closed meanwhile)."""
        owner = self._owner
        try:
            owner.call("free leases", owner.free, [lease for lease, _ in freed])
            return True
        except LedgerError:
            now = time.monotonic()
            with self._lock:
                if stops == self._stops:
                    self._freed += [(lease, until) for lease, until in freed if until > now]
            return False
