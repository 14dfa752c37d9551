"""``Ledger``: the one writer of a session's append-only records, each written and
flushed (as durable as the fsync policy asks) before its event is observed;
``PendingLedger``, a new session's ledger made on first use. The record kinds are
``_records``'s, the replay ``_derive``'s; the package page says what is recorded when."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, final

import trio
from trio.lowlevel import enable_ki_protection

from .._log import LEDGER
from .._settings import ModelSettings, for_the_record
from ..engine._fallback import model_label as model_label
from ..engine._options import check_fsync as check_fsync
from ..errors import TOOL_FATAL as TOOL_FATAL
from ..events import ApprovalDecision, TurnEnd, TurnInterrupted
from ..messages._ir import Message, ToolCall, ToolResultMessage
from ..model import Usage
from ..tools._types import json_builtins
from ._policy import DEFAULT_SNAPSHOTS as DEFAULT_SNAPSHOTS
from ._policy import SnapshotPolicy as SnapshotPolicy
from ._policy import SnapshotTaker
from ._policy import check_snapshots as check_snapshots
from ._records import FORMAT_VERSION as FORMAT_VERSION
from ._records import ApprovalDecidedRecord as ApprovalDecidedRecord
from ._records import ApprovalRequestedRecord as ApprovalRequestedRecord
from ._records import AttemptFailedRecord as AttemptFailedRecord
from ._records import CompactedRecord as CompactedRecord
from ._records import EventsReservedRecord as EventsReservedRecord
from ._records import LeaseLostError as LeaseLostError
from ._records import LedgerCorruptError as LedgerCorruptError
from ._records import LedgerError as LedgerError
from ._records import MessageRecord as MessageRecord
from ._records import OutputRecord as OutputRecord
from ._records import Record as Record
from ._records import SessionChangedError as SessionChangedError
from ._records import SessionClosedRecord as SessionClosedRecord
from ._records import SessionExistsError as SessionExistsError
from ._records import SessionLockedError as SessionLockedError
from ._records import SessionStartRecord as SessionStartRecord
from ._records import StepEndRecord as StepEndRecord
from ._records import StepStartRecord as StepStartRecord
from ._records import ToolCallRecord as ToolCallRecord
from ._records import ToolCancelledRecord as ToolCancelledRecord
from ._records import ToolFailedRecord as ToolFailedRecord
from ._records import ToolResultRecord as ToolResultRecord
from ._records import ToolSkippedRecord as ToolSkippedRecord
from ._records import TurnEndRecord as TurnEndRecord
from ._records import TurnStartRecord as TurnStartRecord
from ._records import encode_records as encode_records
from ._records import record_decoder as record_decoder
from ._records import record_encoder
from ._records import session_exists as session_exists

if TYPE_CHECKING:
    from ._derive import DerivedSession  # replay: imported when a session resumes

__all__ = [
    "FORMAT_VERSION",
    "DEFAULT_SNAPSHOTS",
    "SEQUENCE_BLOCK",
    "TOOL_FATAL",
    "ApprovalDecidedRecord",
    "ApprovalRequestedRecord",
    "AttemptFailedRecord",
    "CompactedRecord",
    "EventsReservedRecord",
    "FsyncPolicy",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "MessageRecord",
    "OutputRecord",
    "PendingLedger",
    "Record",
    "LeaseLostError",
    "SessionChangedError",
    "SessionClosedRecord",
    "SessionExistsError",
    "SessionLockedError",
    "SessionStartRecord",
    "SessionWriter",
    "SnapshotPolicy",
    "StepEndRecord",
    "StepStartRecord",
    "ToolCallRecord",
    "ToolCancelledRecord",
    "ToolFailedRecord",
    "ToolResultRecord",
    "ToolSkippedRecord",
    "TurnEndRecord",
    "TurnStartRecord",
    "check_snapshots",
    "encode_records",
    "model_label",
    "record_decoder",
    "session_exists",
]

SEQUENCE_BLOCK: Final = 1024
"""Event sequences a writer reserves at a time (``events/reserved``): after a crash,
numbering resumes at most this far above the last event actually sent."""

FsyncPolicy = Literal["always", "step", "never"]


def _as_json(value: Any) -> tuple[Any, str | None]:
    """``value`` as JSON builtins (dict keys as strings; a pydantic model as pydantic
    dumps it), or None and why it has no JSON form (an object an
    ``output_validator`` returned, say)."""
    try:
        return json_builtins(value), None
    except (TypeError, ValueError) as exc:
        return None, f"{type(value).__qualname__} has no JSON form: {exc}"


class SessionWriter(Protocol):
    """Appends one session's encoded records; a store's half that writes.

    A writer is the session's one writer while it is open: the store locks
    the session when it makes one, and ``aclose`` lets the lock go. A writer
    that failed once (a full disk, a lost lease) writes nothing more and lets
    its lock go: what it stored is whole, and resuming the session goes on
    from there. A writer may carry ``snapshots``, its store's
    ``SnapshotPolicy`` (or None): the ledger writes snapshots by it.
    ``append`` must not await: for a file it writes to the OS at once.
    ``commit`` stores what was appended, synchronously (called once,
    when a session is created, so the session exists as soon as its
    ``Agent`` does). ``flush`` makes everything appended so far written (to
    the OS) and, with ``durable=True``, on disk; it returns at once when
    there is nothing to do.
    """

    def append(self, line: bytes) -> None: ...
    def commit(self) -> None: ...
    async def flush(self, durable: bool) -> None: ...
    async def aclose(self) -> None: ...


@final
class PendingLedger:
    """A new session's ledger, to be created on first use: where (a store's
    ``create``), its id and fsync policy, and the attempt under way, if one is."""

    __slots__ = ("_creating", "create_writer", "fsync", "session_id")

    def __init__(
        self,
        create_writer: Callable[[str], SessionWriter],
        session_id: str,
        fsync: FsyncPolicy,
    ) -> None:
        self.create_writer = create_writer
        self.session_id = session_id
        self.fsync: FsyncPolicy = fsync
        self._creating: trio.Event | None = None

    async def create(
        self,
        *,
        system: str,
        first_request: int,
        first_sequence: int,
        metadata: Mapping[str, Any] | None,
        messages: Iterable[Message],
    ) -> Ledger | None:
        """Create the ledger (``Ledger.create``) in a worker thread, or, while
        another task's attempt is under way, wait for it and return None (look
        again: it may have failed). Raises the store's errors.

        Cancellation waits for the thread (it cannot be stopped halfway), so a
        ledger is returned whole, to be taken at once, or none is made: a
        cancellation before the thread starts creates nothing."""
        if self._creating is not None:
            await self._creating.wait()
            return None
        creating = self._creating = trio.Event()
        try:
            return await trio.to_thread.run_sync(
                partial(
                    Ledger.create,
                    self.create_writer,
                    self.session_id,
                    self.fsync,
                    system=system,
                    first_request=first_request,
                    first_sequence=first_sequence,
                    metadata=metadata,
                    messages=tuple(messages),
                )
            )
        finally:
            self._creating = None
            creating.set()


@final
class Ledger:
    """Writes a session's records in order, under an fsync policy.

    ``always``: every record is on disk before the event it matches is
    observed (and a call's ``tool/call`` before it is dispatched, a step's
    ``step/start`` before its request is opened). ``step``: records reach
    the OS at once (SQLite: the database before the event that follows them;
    PostgreSQL: per step, and before a call is dispatched or a request opened) and
    disk at the end of each step and turn (a process crash loses nothing
    written; a machine crash can lose the step in progress). ``never``: the
    OS decides when to write. The trio thread never waits on an fsync it
    was not asked to: fsyncs run in a shared pool, many records at a time.
    """

    __slots__ = (
        "_closed_seq",
        "_event_durable",
        "_event_flush",
        "_open_turn",
        "_reruns",
        "_reserved",
        "_seq",
        "_snapshots",
        "_step_durable",
        "_writer",
    )

    def __init__(
        self,
        writer: SessionWriter,
        next_seq: int,
        fsync: FsyncPolicy = "step",
        reserved: int = 0,
        closed: bool = False,
        reruns: Iterable[str] = (),
        history: Sequence[Record] | None = None,
    ) -> None:
        check_fsync(fsync)
        self._writer = writer
        self._seq = next_seq
        self._event_durable = fsync == "always"
        self._step_durable = fsync != "never"
        # a store whose every flush is a round trip (PostgreSQL) stores per step, and
        # before the model or a tool acts (``barrier``), not before every event
        self._event_flush = getattr(writer, "flush_per_event", True) or self._event_durable
        self._reserved = reserved  # event sequences below this may be sent
        self._open_turn: int | None = None
        # calls a resume left open to run again (``DerivedSession.reruns``): True
        # once dispatched again (a ``tool/call`` with ``rerun``), False before
        self._reruns: dict[str, bool] | None = dict.fromkeys(reruns, False) or None
        # ``_seq`` right after a ``session/closed`` record (``closed``: the last one)
        self._closed_seq = next_seq if closed else -1
        # snapshots, by the store's policy, when the records since the last one (or
        # since session/start) are known: ``history`` for a resumed session
        policy: SnapshotPolicy | None = getattr(writer, "snapshots", None)
        if next_seq > 0 and history is None:
            policy = None
        self._snapshots = None if policy is None else SnapshotTaker(policy, list(history or ()))

    @classmethod
    def create(
        cls,
        create_writer: Callable[[str], SessionWriter],
        session_id: str,
        fsync: FsyncPolicy,
        *,
        system: str,
        first_request: int,
        first_sequence: int,
        metadata: Mapping[str, Any] | None,
        messages: Iterable[Message],
    ) -> Ledger:
        """A new session's ledger: a writer from ``create_writer`` (a store's
        ``create``, which locks the session), its ``session/start`` and initial
        messages, stored at once (``commit``). Blocking file or database work:
        call it in a worker thread (``trio.to_thread.run_sync``). Raises the
        store's errors (``SessionExistsError``, ``SessionLockedError``,
        ``LedgerError``); a writer that failed has let the session's lock go."""
        ledger = cls(create_writer(session_id), 0, fsync)
        ledger.session_started(
            session_id, time.time(), system, first_request, first_sequence, metadata
        )
        for message in messages:
            ledger.message(message)
        ledger.commit()
        return ledger

    @classmethod
    async def take_over(
        cls,
        writer: SessionWriter,
        derived: DerivedSession,
        fsync: FsyncPolicy,
        closing: list[tuple[ToolResultMessage, str]] | None = None,
        history: Sequence[Record] | None = None,
    ) -> tuple[Ledger, list[tuple[ToolResultMessage, str]]]:
        """The ledger of a resumed session (``writer`` from the store's ``reopen``),
        with what the last writer left open closed: each call without a result
        answered (``closing_results``, returned with their codes; a call held for
        approval and not dispatched stays open, in ``derived.pending_approvals``,
        and so does one to run again, in ``derived.reruns`` or held again
        (``owed_again``): its next dispatch is recorded as a rerun)
        and an open turn ended as ``interrupted``, durably. ``closing``: those
        results when the caller has them already (a resume that took the replay's
        conversation, ``DerivedSession.take_conversation``). ``history``: the records
        ``derived`` was derived from (from ``session/start`` or a snapshot on), for
        the store's snapshots; without it the session writes none. Cancellation or
        a failure: the writer is closed (its lock let go) before the error propagates."""
        # closing a closed session again, with nothing written since, writes nothing
        ledger = cls(
            writer,
            derived.next_seq,
            fsync,
            reserved=derived.reserved,
            closed=derived.closed,
            reruns=[call.id for call in derived.owed_again()],
            history=history,
        )
        done = False
        try:
            if closing is None:
                closing = derived.closing_results()
            for result, code in closing:
                ledger.message(result, code)
            if derived.open_turn is not None:
                ledger.turn_ended(derived.open_turn, TurnInterrupted(), derived.sequence)
            await ledger.barrier("turn")
            done = True
        finally:
            if not done:
                with trio.CancelScope(shield=True):
                    try:
                        await ledger.aclose()
                    except LedgerError:
                        pass  # the first failure is the one that propagates
        return ledger, closing

    @property
    def next_seq(self) -> int:
        return self._seq

    # Every method that writes is protected from KeyboardInterrupt (trio delivers it
    # at any bytecode of unprotected code): a record written without its ``seq``
    # counted, or a turn written open without the writer knowing, would make the
    # next record damage the ledger. The protection costs nothing per call.
    @enable_ki_protection
    def _write(self, record: Record) -> None:
        line = record_encoder.encode(record) + b"\n"
        self._writer.append(line)
        self._seq += 1
        if self._snapshots is not None:
            self._snapshots.wrote(record, len(line))

    # -- records
    def session_started(
        self,
        session_id: str,
        created: float,
        system: str,
        first_request: int = 1,
        first_sequence: int = 0,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._write(
            SessionStartRecord(
                seq=self._seq,
                format=FORMAT_VERSION,
                session_id=session_id,
                created=created,
                system=system,
                first_request=first_request,
                first_sequence=first_sequence,
                metadata={} if metadata is None else dict(metadata),
            )
        )

    @enable_ki_protection
    def session_closed(self, sequence: int) -> None:
        """The session is closed cleanly. A turn still open (one a ``BaseException``
        such as ``KeyboardInterrupt`` cut short) is ended as ``interrupted`` first.
        A session whose last record already says so (resumed, and nothing written
        since) gets no second ``session/closed``: a resume that did nothing leaves
        the ledger as it found it."""
        self._end_open_turn(sequence)
        if self._seq != self._closed_seq:
            self._write(SessionClosedRecord(seq=self._seq, sequence=sequence))
            self._closed_seq = self._seq

    def _end_open_turn(self, sequence: int) -> None:
        if self._open_turn is not None:
            self.turn_ended(self._open_turn, TurnInterrupted(), sequence)

    def commit(self) -> None:
        """Store the records so far now, synchronously (a session being created)."""
        self._writer.commit()

    @enable_ki_protection
    def turn_started(self, turn: int, sequence: int, model: str = "") -> None:
        """A turn begins (run by ``model``, a ``model_label``); one still open (cut
        short by a ``BaseException`` that the application caught, a REPL's Ctrl-C)
        is ended as ``interrupted`` first."""
        self._end_open_turn(sequence)
        self._write(TurnStartRecord(seq=self._seq, turn=turn, sequence=sequence, model=model))
        self._open_turn = turn

    @enable_ki_protection
    def turn_ended(self, turn: int, end: TurnEnd, sequence: int) -> None:
        """The turn ended; then a ``snapshot``, when the store's policy says one is due."""
        self._write(TurnEndRecord(seq=self._seq, turn=turn, end=end, sequence=sequence))
        self._open_turn = None
        if self._snapshots is not None:
            self._snapshot(self._snapshots)

    def _snapshot(self, snapshots: SnapshotTaker) -> None:
        try:
            record = snapshots.turn_ended()
        except LedgerCorruptError as exc:  # the replay refuses what was written: no more
            LEDGER.warning("no more snapshots in this session (at record %d): %s", self._seq, exc)
            self._snapshots = None
            return
        if record is not None:
            size = len(record.state)
            self._write(record)
            snapshots.snapshot_written(size)

    def message(
        self,
        message: Message,
        code: str | None = None,
        usage: Usage | None = None,
        model: str = "",
    ) -> None:
        if type(message) is ToolResultMessage:
            self._write(ToolResultRecord(seq=self._seq, result=message, code=code))
        else:
            self._write(MessageRecord(seq=self._seq, message=message, usage=usage, model=model))

    def compacted(self, messages: tuple[Message, ...]) -> None:
        self._write(CompactedRecord(seq=self._seq, messages=messages))

    def step_started(self, request_id: str, settings: ModelSettings | None = None) -> None:
        recorded = for_the_record(settings)
        self._write(StepStartRecord(seq=self._seq, request_id=request_id, settings=recorded))

    def step_ended(self, request_id: str, stop_reason: str) -> None:
        self._write(StepEndRecord(seq=self._seq, request_id=request_id, stop_reason=stop_reason))

    def tool_call(self, call: ToolCall, effect: str = "once") -> None:
        """``call`` is dispatched now; a call a resume left to run again is recorded
        as its rerun (its first dispatch's effect stands)."""
        reruns = self._reruns
        if reruns is not None and reruns.get(call.id) is False:
            reruns[call.id] = True
            self._write(ToolCallRecord(seq=self._seq, call_id=call.id, rerun=True))
            return
        self._write(
            ToolCallRecord(seq=self._seq, call_id=call.id, effect=effect)  # type: ignore[arg-type]
        )

    def tool_skipped(self, call: ToolCall) -> None:
        reruns = self._reruns
        if reruns is not None and reruns.get(call.id) is True:
            reruns[call.id] = False  # not dispatched again after all: still to run again
        self._write(ToolSkippedRecord(seq=self._seq, call_id=call.id))

    def tool_cancelled(self, call: ToolCall) -> None:
        self._write(ToolCancelledRecord(seq=self._seq, call_id=call.id))

    def tool_failed(self, call: ToolCall, error: str) -> None:
        self._write(ToolFailedRecord(seq=self._seq, call_id=call.id, error=error))

    def output_accepted(self, request_id: str, output: Any) -> None:
        """The open turn's typed answer, given by ``request_id``, was accepted: recorded
        as JSON (``turn/output``) before the turn ends. Outside a turn nothing is
        recorded (a turn is always open when a session's turn accepts one)."""
        if self._open_turn is None:
            return
        value, error = _as_json(output)
        self._write(
            OutputRecord(
                seq=self._seq,
                turn=self._open_turn,
                request_id=request_id,
                output=value,
                error=error,
            )
        )

    def approval_requested(self, call: ToolCall) -> None:
        """``call`` of the open step is held for a person's approval
        (``approval/requested``, in the open turn). Written after the assistant
        message that makes the call; ``RuntimeError`` when no turn is open (a
        session's step is always in one)."""
        if self._open_turn is None:
            raise RuntimeError(f"approval/requested for call {call.id!r} outside a turn")
        self._write(
            ApprovalRequestedRecord(
                seq=self._seq,
                turn=self._open_turn,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            )
        )

    def approval_decided(self, decision: ApprovalDecision) -> None:
        """A decision on a held call (``approval/decided``): in a turn or between
        turns, once per call, before the call's result."""
        self._write(ApprovalDecidedRecord.of(self._seq, decision))

    def attempt_failed(
        self,
        request_id: str,
        attempt: int,
        error: str,
        retry_in: float | None,
        usage: Usage | None = None,
        model: str = "",
    ) -> None:
        self._write(
            AttemptFailedRecord(
                seq=self._seq,
                request_id=request_id,
                attempt=attempt,
                error=error,
                retry_in=retry_in,
                usage=usage,
                model=model,
            )
        )

    # -- durability
    async def before_event(self, sequence: int) -> None:
        """Before the event numbered ``sequence`` can be observed: reserve its number
        (a record every ``SEQUENCE_BLOCK`` events) and make the records so far as
        durable as the policy asks for an event."""
        if sequence >= self._reserved:
            until = sequence + SEQUENCE_BLOCK
            self._write(EventsReservedRecord(seq=self._seq, until=until))
            self._reserved = until  # after the record: never counted reserved unwritten
            await self._writer.flush(self._event_durable)  # stored before it is sent
        elif self._event_flush:
            await self._writer.flush(self._event_durable)

    async def barrier(self, point: Literal["event", "step", "turn"]) -> None:
        """Wait until the records so far are as durable as the policy asks at ``point``."""
        durable = self._event_durable if point == "event" else self._step_durable
        await self._writer.flush(durable)

    async def aclose(self) -> None:
        """Make everything durable (unless the policy is ``never``) and close the
        writer, letting the session's lock go; closed even when the flush fails."""
        try:
            await self._writer.flush(self._step_durable)
        finally:
            await self._writer.aclose()
