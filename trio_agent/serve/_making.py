"""A new session's first turn on a server of several: whether it made the session,
or another server made it first (then its message goes to that one's inbox)."""

from __future__ import annotations

from typing import final

import attrs
import trio

from ..errors import leaves
from ..ledger._records import SessionExistsError, SessionLockedError

__all__ = ["Making", "lost_race"]


@final
@attrs.define
class Making:
    """Whether a new session's first turn made it (``event`` set at its first event
    or its end), and the failure if another server made it first."""

    event: trio.Event = attrs.field(factory=trio.Event)
    lost: Exception | None = None


def lost_race(error: BaseException) -> bool:
    """Whether a new session's turn failed as another server made the session."""
    return isinstance(error, SessionLockedError | SessionExistsError) or any(
        isinstance(e, SessionLockedError | SessionExistsError) for e in leaves(error)
    )
