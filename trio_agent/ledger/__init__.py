"""The session ledger: append-only records, and the state derived from them.

A session is written as records with a contiguous ``seq`` as it happens.
The transcript is never stored on its own: it is derived from the records
(``derive``), so what a resumed session sees is exactly what was recorded.
Each message is recorded once, when it joins the transcript (``message``
for user and assistant messages, ``tool/result`` for tool results);
``tool/call`` is recorded just before a call is dispatched, and a call that
ends without a result says how (``tool/cancelled``, ``tool/failed``), so a
resume can tell a call that never started, one that was cancelled or failed,
and one whose outcome is unknown because the process died during it. Now and
then, after a turn's end, a ``snapshot`` records the state derived so far (by
the store's ``SnapshotPolicy``), so a resume replays from the last one; it
never replaces a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy
from .._public import publish as _publish
from ..engine._options import check_fsync as check_fsync
from ..errors import TOOL_FATAL as TOOL_FATAL

if TYPE_CHECKING:
    from ._derive import TOOL_CANCELLED as TOOL_CANCELLED
    from ._derive import TOOL_NOT_STARTED as TOOL_NOT_STARTED
    from ._derive import TOOL_OUTCOME_UNKNOWN as TOOL_OUTCOME_UNKNOWN
    from ._derive import DerivedSession as DerivedSession
    from ._derive import derive as derive
    from ._errors import LeaseLostError as LeaseLostError
    from ._errors import LedgerCorruptError as LedgerCorruptError
    from ._errors import LedgerError as LedgerError
    from ._errors import SessionChangedError as SessionChangedError
    from ._errors import SessionExistsError as SessionExistsError
    from ._errors import SessionLockedError as SessionLockedError
    from ._errors import SessionNotFoundError as SessionNotFoundError
    from ._errors import session_exists as session_exists
    from ._ledger import SEQUENCE_BLOCK as SEQUENCE_BLOCK
    from ._ledger import FsyncPolicy as FsyncPolicy
    from ._ledger import Ledger as Ledger
    from ._ledger import PendingLedger as PendingLedger
    from ._ledger import SessionWriter as SessionWriter
    from ._ledger import model_label as model_label
    from ._records import FORMAT_VERSION as FORMAT_VERSION
    from ._records import ApprovalDecidedRecord as ApprovalDecidedRecord
    from ._records import ApprovalRequestedRecord as ApprovalRequestedRecord
    from ._records import AttemptFailedRecord as AttemptFailedRecord
    from ._records import CompactedRecord as CompactedRecord
    from ._records import EventsReservedRecord as EventsReservedRecord
    from ._records import MessageRecord as MessageRecord
    from ._records import OutputRecord as OutputRecord
    from ._records import Record as Record
    from ._records import SessionClosedRecord as SessionClosedRecord
    from ._records import SessionStartRecord as SessionStartRecord
    from ._records import SnapshotRecord as SnapshotRecord
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

__all__ = [
    "FORMAT_VERSION",
    "SEQUENCE_BLOCK",
    "TOOL_CANCELLED",
    "TOOL_FATAL",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "ApprovalDecidedRecord",
    "ApprovalRequestedRecord",
    "AttemptFailedRecord",
    "CompactedRecord",
    "DerivedSession",
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
    "SessionNotFoundError",
    "SessionStartRecord",
    "SessionWriter",
    "SnapshotRecord",
    "StepEndRecord",
    "StepStartRecord",
    "ToolCallRecord",
    "ToolCancelledRecord",
    "ToolFailedRecord",
    "ToolResultRecord",
    "ToolSkippedRecord",
    "TurnEndRecord",
    "TurnStartRecord",
    "derive",
    "encode_records",
    "model_label",
    "record_decoder",
    "session_exists",
    "check_fsync",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)

# Each name is imported when first named: a session kept in memory loads no
# record, and replay loads when a session resumes.
__getattr__ = _lazy(
    globals(),
    {
        "ApprovalDecidedRecord": "._records",
        "ApprovalRequestedRecord": "._records",
        "AttemptFailedRecord": "._records",
        "CompactedRecord": "._records",
        "DerivedSession": "._derive",
        "EventsReservedRecord": "._records",
        "FORMAT_VERSION": "._records",
        "FsyncPolicy": "._ledger",
        "LeaseLostError": "._errors",
        "Ledger": "._ledger",
        "LedgerCorruptError": "._errors",
        "LedgerError": "._errors",
        "MessageRecord": "._records",
        "OutputRecord": "._records",
        "PendingLedger": "._ledger",
        "Record": "._records",
        "SEQUENCE_BLOCK": "._ledger",
        "SessionChangedError": "._errors",
        "SessionClosedRecord": "._records",
        "SessionExistsError": "._errors",
        "SessionLockedError": "._errors",
        "SessionNotFoundError": "._errors",
        "SessionStartRecord": "._records",
        "SessionWriter": "._ledger",
        "SnapshotRecord": "._records",
        "StepEndRecord": "._records",
        "StepStartRecord": "._records",
        "TOOL_CANCELLED": "._derive",
        "TOOL_NOT_STARTED": "._derive",
        "TOOL_OUTCOME_UNKNOWN": "._derive",
        "ToolCallRecord": "._records",
        "ToolCancelledRecord": "._records",
        "ToolFailedRecord": "._records",
        "ToolResultRecord": "._records",
        "ToolSkippedRecord": "._records",
        "TurnEndRecord": "._records",
        "TurnStartRecord": "._records",
        "derive": "._derive",
        "encode_records": "._records",
        "model_label": "._ledger",
        "record_decoder": "._records",
        "session_exists": "._errors",
    },
)
