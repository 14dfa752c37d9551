"""Every failure code, the errors that carry one, and exceptions as text.

A failed run or turn carries a ``code``: a stable string a program can match,
all of them listed here (``FailureCode``). The step raises ``StepError`` with
one to end the turn; the pure step checks raise ``ModelProtocolError``.
Exceptions reach results, records and the model as text through
``describe``, which never raises and always gives encodable text.
"""

from __future__ import annotations

from typing import Final, Literal

from .limits import without_lone_surrogates

__all__ = [
    "CONTEXT_OVERFLOW",
    "HOOK_ERROR",
    "INTERNAL_ERROR",
    "INVALID_TRANSCRIPT",
    "MODEL_ERROR",
    "MODEL_PROTOCOL_ERROR",
    "OUTPUT_INVALID",
    "TOOL_FATAL",
    "FailureCode",
    "ModelProtocolError",
    "StepError",
    "describe",
    "first_leaf",
    "leaves",
    "message_of",
]

FailureCode = Literal[
    "INVALID_TRANSCRIPT",
    "MODEL_PROTOCOL_ERROR",
    "MODEL_ERROR",
    "TOOL_FATAL",
    "HOOK_ERROR",
    "CONTEXT_OVERFLOW",
    "OUTPUT_INVALID",
    "INTERNAL_ERROR",
]
"""Every code a ``Failed`` result or a ``TurnFailed`` end can carry."""

INVALID_TRANSCRIPT: Final = "INVALID_TRANSCRIPT"
"""The initial messages do not make a valid transcript; the model was not called."""
MODEL_PROTOCOL_ERROR: Final = "MODEL_PROTOCOL_ERROR"
"""The model's stream or response broke a step rule."""
MODEL_ERROR: Final = "MODEL_ERROR"
"""The model's stream raised (after any retries the session allowed)."""
TOOL_FATAL: Final = "TOOL_FATAL"
"""A tool raised ``FatalToolError``."""
HOOK_ERROR: Final = "HOOK_ERROR"
"""A session hook raised, or returned something unusable."""
CONTEXT_OVERFLOW: Final = "CONTEXT_OVERFLOW"
"""The request does not fit the context window, even after compaction."""
OUTPUT_INVALID: Final = "OUTPUT_INVALID"
"""The model's typed answer (``output_type=``) did not fit, more than
``output_retries`` times."""
INTERNAL_ERROR: Final = "INTERNAL_ERROR"
"""A bug in trio-agent itself: the run still ends visibly, then the exception propagates."""


class StepError(Exception):
    """Ends the turn as failed with a stable ``code``; a hook may raise it directly."""

    def __init__(self, code: str, detail: str, error: BaseException | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.error = error


class ModelProtocolError(Exception):
    """A chunk or response that breaks a step rule; the loop reports ``MODEL_PROTOCOL_ERROR``."""


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions in ``error``: itself, or every leaf of a (nested) group."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first exception at the bottom of a (nested) group."""
    first = group.exceptions[0]
    return first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or a note saying it could not be read: an exception's ``__str__``
    is other people's code, and a failing one must not turn a result into a crash."""
    try:
        return str(exc)
    except Exception as inner:
        return f"(its message could not be read: {type(inner).__name__})"


def describe(exc: BaseException) -> str:
    """``Type: message``; for a group, its leaf exceptions, so the model sees what failed.
    Always encodable text: an exception may quote a file name that is not UTF-8."""
    if isinstance(exc, BaseExceptionGroup):
        inner = "; ".join(describe(e) for e in exc.exceptions)
        return f"{type(exc).__name__} ({inner})"
    return without_lone_surrogates(f"{type(exc).__name__}: {message_of(exc)}")
