"""Every option check, in one place, so the loop, the session, the retry policy and
the ledger agree on what a value may be, and say so in the same words.

Each check raises ``TypeError`` or ``ValueError`` naming the option and the
value it got; none has side effects.
"""

from __future__ import annotations

import math
from typing import Any, Final

import trio

from .limits import MAX_AGENT_STEPS, is_valid_unicode

__all__ = [
    "FSYNC_POLICIES",
    "check_cancel_scope",
    "check_fsync",
    "check_int",
    "check_loop_options",
    "check_max_steps",
    "check_messages_and_model",
    "check_optional_hook",
    "check_positive",
    "check_store",
    "check_system",
    "check_tool_execution",
]

FSYNC_POLICIES: Final = ("always", "step", "never")


def check_messages_and_model(messages: object, model: object) -> None:
    """``TypeError`` unless ``messages`` is a list or tuple and ``model`` a ``Model``."""
    if type(messages) not in (list, tuple):
        raise TypeError(f"messages must be a list or tuple, got {type(messages).__name__}")
    if not callable(getattr(model, "stream", None)):
        raise TypeError(f"model must have a callable stream(request), got {model!r}")


def check_max_steps(max_steps: object) -> None:
    """An int in 1..``MAX_AGENT_STEPS`` (bool is not an int here): one run of the
    core loop numbers its requests ``request-001`` to ``request-064``. (A session
    numbers requests across its turns, so a turn's budget is only an int >= 1:
    ``check_int``.)"""
    if type(max_steps) is not int:
        raise TypeError(f"max_steps must be an int, got {max_steps!r}")
    if not 1 <= max_steps <= MAX_AGENT_STEPS:
        raise ValueError(f"max_steps must be in 1..{MAX_AGENT_STEPS}, got {max_steps}")


def check_int(name: str, value: object, least: int, *, optional: bool = False) -> None:
    """An int (not a bool) >= ``least``, or None when ``optional``."""
    if optional and value is None:
        return
    if type(value) is not int or value < least:
        none = "None or " if optional else ""
        raise ValueError(f"{name} must be {none}an int >= {least}, got {value!r}")


def check_positive(name: str, value: object) -> None:
    """A finite number > 0."""
    if type(value) not in (int, float) or not value > 0 or not math.isfinite(value):  # type: ignore[operator]
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_system(system: object) -> None:
    """``TypeError``/``ValueError`` unless ``system`` is a valid Unicode str."""
    if type(system) is not str:
        raise TypeError(f"system must be a str, got {type(system).__name__}")
    if not is_valid_unicode(system):
        raise ValueError("system is not valid Unicode (lone surrogate)")


def check_tool_execution(
    tool_execution: object, max_parallel_tools: object, tool_grace_period: object
) -> None:
    """``TypeError``/``ValueError`` unless the tool-batch options are usable."""
    if tool_execution not in ("sequential", "parallel"):
        raise ValueError(
            f"tool_execution must be 'sequential' or 'parallel', got {tool_execution!r}"
        )
    if type(max_parallel_tools) is not int or max_parallel_tools < 1:
        raise ValueError(f"max_parallel_tools must be an int >= 1, got {max_parallel_tools!r}")
    if (
        type(tool_grace_period) not in (int, float) or not 0 <= tool_grace_period < float("inf")  # type: ignore[operator]
    ):
        raise ValueError(
            f"tool_grace_period must be a finite number >= 0, got {tool_grace_period!r}"
        )


def check_cancel_scope(cancel_scope: object) -> None:
    """``TypeError``/``ValueError`` unless None or a ``trio.CancelScope`` not yet entered."""
    if cancel_scope is None:
        return
    if type(cancel_scope) is not trio.CancelScope:
        raise TypeError(f"cancel_scope must be a trio.CancelScope or None, got {cancel_scope!r}")
    if getattr(cancel_scope, "_has_been_entered", False):
        raise ValueError("cancel_scope has already been entered; pass a fresh one")


def check_loop_options(
    messages: object,
    model: object,
    tools: object,
    max_steps: object,
    request_sequence_start: object,
    cancel_scope: object,
    system: object,
) -> None:
    """The options of ``run_agent_loop``, in the order the contract lists them."""
    from .tools import ToolRegistry

    check_messages_and_model(messages, model)
    if type(tools) is not ToolRegistry:
        raise TypeError(f"tools must be a ToolRegistry, got {type(tools).__name__}")
    check_max_steps(max_steps)
    if type(request_sequence_start) is not int:
        raise TypeError(f"request_sequence_start must be an int, got {request_sequence_start!r}")
    if request_sequence_start < 1:
        raise ValueError(f"request_sequence_start must be >= 1, got {request_sequence_start}")
    last = request_sequence_start + max_steps - 1  # type: ignore[operator]
    if last > MAX_AGENT_STEPS:
        raise ValueError(
            f"requests {request_sequence_start}..{last} go past request {MAX_AGENT_STEPS}"
        )
    check_cancel_scope(cancel_scope)
    check_system(system)


def check_optional_hook(name: str, value: object) -> None:
    """None, or something callable (an async hook)."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be an async callable or None, got {value!r}")


def check_fsync(fsync: object) -> None:
    """``ValueError`` unless ``fsync`` is a durability policy."""
    if fsync not in FSYNC_POLICIES:
        raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")


def check_store(store: Any, session_id: object, fsync: object) -> None:
    """A ``SessionStore`` (or None, with neither a session id nor an fsync policy)."""
    if store is None:
        if session_id is not None or fsync != "step":
            raise ValueError("session_id and fsync need a store")
        return
    for method in ("create", "reopen", "load"):
        if not callable(getattr(store, method, None)):
            raise TypeError(f"store must be a SessionStore, got {store!r}")
    check_fsync(fsync)
