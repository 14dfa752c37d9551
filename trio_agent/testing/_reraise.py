"""Raising one scripted exception again and again."""

from __future__ import annotations

_SAVED = "_trio_agent_scripted_traceback"


def replayable(error: BaseException) -> BaseException:
    """``error``, ready to be raised once more by a script or a fault.

    One instance is raised on every replay (a script can be shared by many
    models). Raised as it is, it would carry the tracebacks of all earlier
    raises, growing each time; with none, it would lose the frames it had
    when it was scripted (a recorded real failure). It keeps those.
    """
    state = error.__dict__
    if _SAVED not in state:
        state[_SAVED] = error.__traceback__
    return error.with_traceback(state[_SAVED])
