"""The fleet's inbox: input queued for a session in PostgreSQL, and its outcome.

``submit`` stores a message as a row of the store's ``inbox`` table and
notifies the workers (``{schema}.inbox``, the session id) in the same
transaction; a worker answers the rows of a session in order, one turn each,
then stores the turn's result in the row and notifies ``{schema}.done`` (the
row's id), which ``wait_for_turn`` listens for. A row's message joins the
transcript with the id ``fleet-{row id}``, so a worker that takes over a
session knows whether the worker before it had already recorded it.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any, Final, NamedTuple, final

import msgspec
import trio

from ..events import TurnResult
from ..ledger import (
    LedgerError,
    MessageRecord,
    Record,
    SessionNotFoundError,
    StepStartRecord,
    TurnEndRecord,
    TurnStartRecord,
)
from ..ledger._derive import add_usage
from ..messages import (
    AssistantMessage,
    InputBlock,
    TranscriptError,
    UserMessage,
    text_from_assistant,
)
from ..messages._rules import BlockError, check_content
from ..model import Usage
from ..stores import PostgresStore
from ..stores._base import check_session_id
from ..tools._types import json_bytes
from ._listen import Listener, channel

if TYPE_CHECKING:
    from psycopg import Connection

    from ..session._agent import Agent
    from ..session._turn_run import TurnRun

__all__ = [
    "Input",
    "answered",
    "input_turn",
    "message_id",
    "pending",
    "recorded_result",
    "refuse",
    "submit",
    "wait_for_turn",
]

POLL_SECONDS: Final = 1.0  # a lost notification is noticed within this
_content_decoder: Final = msgspec.json.Decoder(str | tuple[InputBlock, ...])
_result_decoder: Final = msgspec.json.Decoder(TurnResult[Any])


class Input(NamedTuple):
    """A queued row: its id, its message's content, whether it may create the session;
    ``refused``: why it cannot be run (its content is no message), else None."""

    id: int
    content: str | tuple[InputBlock, ...]
    create: bool
    refused: str | None = None


def message_id(input_id: int) -> str:
    """The id the input's message has in the transcript."""
    return f"fleet-{input_id}"


def input_turn(agent: Agent, row: Input, look_back: bool) -> TurnRun[Any] | str | None:
    """What answers ``row`` on ``agent`` (the session's holder): the turn started for
    it, not yet entered (its message, or, when a holder before had recorded the
    message and the model still owes its reply, a turn on no new input that
    continues it); None when its turn was recorded whole (``recorded_result`` is
    its answer); or why it cannot run (a ``str``): its content is no message, or
    the agent refuses it as input (``TranscriptError`` before the turn starts:
    nothing is recorded, and it would be refused again each time). ``look_back``:
    look for the message in the transcript first (a holder may have recorded it)."""
    if row.refused is not None:
        return row.refused
    mid = message_id(row.id)
    if look_back and any(message.id == mid for message in agent.messages):
        return agent.turn() if agent.awaiting_reply else None
    try:
        return agent.turn(UserMessage(id=mid, content=row.content))
    except TranscriptError as exc:
        return f"the agent refuses it as input: {exc}"


def inbox_sql(schema: str) -> list[str]:
    """The inbox's DDL: one row per submitted input, its outcome once answered."""
    return [
        f"""CREATE TABLE IF NOT EXISTS "{schema}".inbox (
            id bigserial PRIMARY KEY,
            session_id text NOT NULL,
            content bytea NOT NULL,
            create_session boolean NOT NULL,
            submitted timestamptz NOT NULL DEFAULT now(),
            done timestamptz,
            result bytea,
            error text)""",
        f"""CREATE INDEX IF NOT EXISTS inbox_waiting ON "{schema}".inbox (session_id, id)
            WHERE done IS NULL""",
    ]


_READY: weakref.WeakSet[PostgresStore] = weakref.WeakSet()
"""The stores whose schema has the inbox (looked at once per store)."""


async def inbox_ready(store: PostgresStore) -> None:
    """Make the inbox in the store's schema if it is missing (unless the store may
    not create: ``LedgerError`` then), once per store. The fleet owns this table;
    the store knows nothing of it."""
    if store not in _READY:
        await store.run("make the fleet's inbox", _make_inbox, store)
        _READY.add(store)


def _make_inbox(connection: Connection[Any], store: PostgresStore) -> None:
    s = store.schema
    (exists,) = connection.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{s}".inbox',)
    ).fetchone() or (False,)
    if exists:
        return
    if not store.create_schema:
        raise LedgerError(f"{store!r}: schema {s!r} has no fleet inbox, and may not make one")
    connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{s}.inbox",))
    for statement in inbox_sql(s):
        connection.execute(statement)


def postgres_store(store: object, what: str) -> PostgresStore:
    if not isinstance(store, PostgresStore):
        raise TypeError(f"{what} needs a PostgresStore, got {type(store).__name__}")
    return store


async def submit(
    store: PostgresStore,
    session_id: str,
    message: str | UserMessage,
    *,
    create: bool = False,
) -> int:
    """Queue ``message`` for session ``session_id``, durably, and wake the workers;
    the input's number, for ``wait_for_turn``. A worker answers a session's
    input in the order it was queued, one turn each.

    ``create=True`` lets a worker start the session if it does not exist yet
    (``make_agent`` is then asked for a new agent); without it a session
    that is neither recorded nor queued to be created is a ``LedgerError``.
    A ``UserMessage``'s content is queued; its id is the fleet's
    (``fleet-{number}``), so a worker that takes the session over never
    records it twice. Content the agent would refuse (more than
    ``MAX_CONTENT_BLOCKS`` blocks, a lone surrogate, media past its limits:
    the checks an ``Agent`` makes on a user message) is a ``TranscriptError``
    here, and nothing is queued. Cancellation: the statement runs to its end
    in a worker thread; cancelled meanwhile, the input may be queued (no
    number returned).
    """
    store = postgres_store(store, "submit")
    check_session_id(session_id)
    if isinstance(message, UserMessage):
        content = message.content
    elif type(message) is str:
        content = message
    else:
        raise TypeError(f"message must be a str or a UserMessage, got {type(message).__name__}")
    if not content:
        raise ValueError("message must not be empty")
    if type(create) is not bool:
        raise TypeError(f"create must be a bool, got {create!r}")
    await inbox_ready(store)  # the fleet's table, made where missing (the store may)
    body = msgspec.json.encode(checked_content(content, session_id))
    return await store.run(
        f"queue input for session {session_id!r}", _insert, store, session_id, body, create
    )


def checked_content(content: object, session_id: str) -> str | tuple[InputBlock, ...]:
    """``content`` as the agent checks a user message's (``check_content``, which
    its ``checked_message`` runs), else ``TranscriptError`` with the agent's code
    and reason, saying it was not queued."""
    try:
        return check_content(content)
    except BlockError as exc:
        raise TranscriptError(
            exc.code, f"the message cannot be queued for session {session_id!r}: {exc}"
        ) from None


def _insert(
    connection: Connection[Any], store: PostgresStore, session_id: str, body: bytes, create: bool
) -> int:
    s = store.schema
    # in the store's transaction: every call of ``store.run`` is one
    if not create:
        (known,) = connection.execute(
            f"""SELECT EXISTS (SELECT 1 FROM "{s}".records WHERE session_id = %s)
                OR EXISTS (SELECT 1 FROM "{s}".inbox
                           WHERE session_id = %s AND create_session AND done IS NULL)""",
            (session_id, session_id),
        ).fetchone() or (False,)
        if not known:
            raise SessionNotFoundError(
                f"no session {session_id!r} in {store!r}: submit(..., create=True) starts one"
            )
    row = connection.execute(
        f"""INSERT INTO "{s}".inbox (session_id, content, create_session)
            VALUES (%s, %s, %s) RETURNING id""",
        (session_id, body, create),
    ).fetchone()
    assert row is not None
    connection.execute("SELECT pg_notify(%s, %s)", (channel(store, "inbox"), session_id))
    number: int = row[0]
    return number


def pending(connection: Connection[Any], store: PostgresStore, session_id: str) -> list[Input]:
    """The session's unanswered input, oldest first (a row whose content is no
    message, which ``submit`` never queues, says so in ``refused``)."""
    rows = connection.execute(
        f"""SELECT id, content, create_session FROM "{store.schema}".inbox
            WHERE session_id = %s AND done IS NULL ORDER BY id""",
        (session_id,),
    ).fetchall()
    return [_input(id, bytes(body), create) for id, body, create in rows]


def _input(input_id: int, body: bytes, create: bool) -> Input:
    try:
        return Input(input_id, _content_decoder.decode(body), create)
    except msgspec.DecodeError as exc:  # a ValidationError too
        return Input(input_id, "", create, f"its content is not a message: {exc}")


def answered(
    connection: Connection[Any], store: PostgresStore, input_id: int, result: TurnResult[Any]
) -> None:
    """Store the turn's result (without the transcript) as the input's answer and
    notify its waiters."""
    body = json_bytes(msgspec.structs.replace(result, messages=()))  # a pydantic output too
    _finish(connection, store, [input_id], body, None)


def refuse(connection: Connection[Any], store: PostgresStore, ids: list[int], error: str) -> None:
    """Answer inputs that cannot be run with ``error`` (``wait_for_turn`` raises it)."""
    _finish(connection, store, ids, None, error)


def _finish(
    connection: Connection[Any],
    store: PostgresStore,
    ids: list[int],
    body: bytes | None,
    error: str | None,
) -> None:
    # in the store's transaction: every call of ``store.run`` is one
    connection.execute(
        f"""UPDATE "{store.schema}".inbox SET done = now(), result = %s, error = %s
            WHERE id = ANY(%s::bigint[]) AND done IS NULL""",
        (body, error, ids),
    )
    for input_id in ids:
        connection.execute("SELECT pg_notify(%s, %s)", (channel(store, "done"), str(input_id)))


def _outcome(
    connection: Connection[Any], store: PostgresStore, session_id: str, input_id: int
) -> tuple[bool, bytes | None, str | None] | None:
    """Whether the input was answered, its result and error; None: no such input."""
    row = connection.execute(
        f"""SELECT done IS NOT NULL, result, error FROM "{store.schema}".inbox
            WHERE id = %s AND session_id = %s""",
        (input_id, session_id),
    ).fetchone()
    if row is None:
        return None
    done, body, error = row
    return bool(done), None if body is None else bytes(body), error


async def wait_for_turn(store: PostgresStore, session_id: str, turn: int) -> TurnResult[Any]:
    """Wait until a worker (or the server holding the session: ``trio-agent
    serve --dsn``) has answered input ``turn`` (the number ``submit``
    returned) of session ``session_id``; the result of the turn that answered
    it (``messages`` left empty: load the session for its transcript;
    ``output`` as JSON). ``LedgerError`` for an input that does not exist or
    could not be run (the error says why), or when the database cannot be
    reached at first; once it was, a lost connection is waited out (looking
    again every second). Wakes on the workers' notification (``LISTEN``), and
    looks again every second should one be lost. Cancellation: returns at
    once (a waiting thread is abandoned: a listener's ends within a second and
    closes its connection, a read once the database answers or the pool gives
    up).
    """
    store = postgres_store(store, "wait_for_turn")
    check_session_id(session_id)
    if type(turn) is not int or turn < 1:
        raise ValueError(f"turn must be a number submit returned, got {turn!r}")
    await inbox_ready(store)
    waiter = _Waiter(store, session_id, turn)
    listener = Listener(store, channel(store, "done"))
    await listener.open()  # before the first look: no notification is missed
    waiter.listener = listener
    try:
        while True:
            outcome = await waiter.look()
            if outcome is not None:
                return outcome
            await waiter.wait()
    finally:
        if waiter.listener is not None:
            await waiter.listener.aclose()


@final
class _Waiter:
    """``wait_for_turn``'s state: its listener (None while the database is away)
    and whether it has reached the database yet."""

    def __init__(self, store: PostgresStore, session_id: str, turn: int) -> None:
        self.store = store
        self.session_id = session_id
        self.turn = turn
        self.listener: Listener | None = None
        self.reached = False

    async def look(self) -> TurnResult[Any] | None:
        """The input's result if it was answered, else None. Cancellation: returns
        at once; the read, abandoned, ends in its thread (it changes nothing, and
        while the database is away it waits for a connection for long)."""
        where = f"session {self.session_id!r}"
        store = self.store
        try:
            row = await trio.to_thread.run_sync(
                store.call,
                f"read input {self.turn} of {where}",
                _outcome,
                store,
                self.session_id,
                self.turn,
                limiter=store.limiter,
                abandon_on_cancel=True,
            )
        except LedgerError:
            if not self.reached:
                raise
            return None  # the database is away: look again after a while
        self.reached = True
        if row is None:
            raise LedgerError(f"{where} in {self.store!r} has no input {self.turn}")
        done, body, error = row
        if not done:
            return None
        if error is not None or body is None:
            raise LedgerError(f"{where}: input {self.turn} was not run: {error}")
        return _result_decoder.decode(body)

    async def wait(self) -> None:
        """Until this input's notification, or a second (one could be lost)."""
        deadline = trio.current_time() + POLL_SECONDS
        wanted = str(self.turn)
        while (left := deadline - trio.current_time()) > 0:
            if self.listener is None:  # listen again, or poll meanwhile
                listener = Listener(self.store, channel(self.store, "done"))
                try:
                    await listener.open()
                except LedgerError:
                    await trio.sleep(left)
                    return
                self.listener = listener
            try:
                if wanted in await self.listener.wait(left):
                    return
            except LedgerError:
                await self.listener.aclose()
                self.listener = None


def recorded_result(records: tuple[Record, ...], input_id: int | None = None) -> TurnResult[Any]:
    """The result of the session's recorded turn that answered input ``input_id``
    (None, or its message not recorded: its last turn), from its records (for
    input a holder that stopped had answered, without storing the answer)."""
    start = _answering_turn(records, input_id)
    opened = records[start]
    assert type(opened) is TurnStartRecord
    steps = 0
    last: AssistantMessage | None = None
    usage = Usage()
    end = None
    for record in records[start:]:
        if type(record) is StepStartRecord:
            steps += 1
        elif type(record) is TurnEndRecord:
            end = record.end
            break
        message = getattr(record, "message", None)
        if type(message) is AssistantMessage:
            last = message
            given = getattr(record, "usage", None)
            if given is not None:
                usage = add_usage(usage, given)
    if end is None:
        raise LedgerError("the session's last turn has no end recorded")
    final_text = "" if last is None else text_from_assistant(last)
    return TurnResult(
        turn=opened.turn, end=end, steps=steps, final_text=final_text, usage=usage, messages=()
    )


def _answering_turn(records: tuple[Record, ...], input_id: int | None) -> int:
    """Where the turn that answered the input starts: the turn that took its
    message, or the last of the turns on no new input that continued it (after
    it was cut); the last turn when the message is not recorded."""
    starts = [i for i, record in enumerate(records) if type(record) is TurnStartRecord]
    taken = None if input_id is None else message_id(input_id)
    at = next(
        (i for i, r in enumerate(records) if type(r) is MessageRecord and r.message.id == taken),
        None,
    )
    if at is None:
        return starts[-1]
    answering = max(i for i in starts if i < at)
    for begin, end in itertools.pairwise([*starts, len(records)]):
        if begin <= answering:
            continue
        if any(
            type(r) is MessageRecord and type(r.message) is UserMessage for r in records[begin:end]
        ):
            break  # a later input's turn
        answering = begin
    return answering
