"""Every option check, in one place, so the loop, the session, the retry policy and
the ledger agree on what a value may be, and say so in the same words.

Each check raises ``TypeError`` or ``ValueError`` naming the option and the
value it got; none has side effects (``claim_cancel_scope`` is no check: it
marks a scope as taken).
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec
import trio

from ..limits import MAX_AGENT_STEPS, MAX_ARGUMENT_DEPTH, is_valid_unicode
from ..messages._view import Transcript
from ..tools._tool import Tool, ToolRegistry, ToolSource

if TYPE_CHECKING:
    from ..model import Model

__all__ = [
    "FSYNC_POLICIES",
    "MAX_METADATA_BYTES",
    "check_cancel_scope",
    "check_scope_unused",
    "check_fsync",
    "check_int",
    "check_loop_options",
    "check_max_steps",
    "check_messages_and_model",
    "check_model",
    "check_metadata",
    "check_optional_hook",
    "check_positive",
    "check_session_store",
    "check_store",
    "check_system",
    "check_tool_execution",
    "check_agent_name",
    "check_tool_sources",
    "check_sources_ready",
    "claim_cancel_scope",
    "model_of",
    "registry_of",
]

FSYNC_POLICIES: Final = ("always", "step", "never")


def model_of(model: object) -> Model:
    """The model ``model`` stands for: a model name (``"openai:gpt-4o"``) made by
    ``providers.infer_model`` (``ValueError`` for an unknown provider or a missing
    key), anything else as it is (checked as a model next). The adapters are
    imported only for a name."""
    if type(model) is not str:
        return cast("Model", model)
    from ..providers._names import infer_model

    return infer_model(model)


def check_messages_and_model(messages: object, model: object) -> None:
    """``TypeError`` unless ``messages`` is a list, a tuple or a ``Transcript`` (an
    agent's ``messages``, a result's) and ``model`` a ``Model``."""
    if type(messages) not in (list, tuple, Transcript):
        raise TypeError(f"messages must be a list or tuple, got {type(messages).__name__}")
    check_model(model, "model must have a callable stream(request)")


def check_model(model: object, what: str) -> None:
    """``TypeError`` (``what``, then the value) unless ``model.stream`` is callable,
    and also when it is an ``async def`` or an async generator function: a call of
    one gives a coroutine or an async generator, never the async context manager
    ``async with model.stream(request)`` needs, and a turn would fail later with
    Python's own words about a coroutine."""
    stream = getattr(model, "stream", None)
    if not callable(stream):
        raise TypeError(f"{what}, got {model!r:.100}")
    # its code's flags, as inspect reads them (inspect's own calls cost 2 us an agent)
    code = getattr(getattr(stream, "__func__", stream), "__code__", None)
    flags = getattr(code, "co_flags", 0)
    shape = (
        "an async function (async def)"
        if flags & inspect.CO_COROUTINE
        else "an async generator function"
        if flags & inspect.CO_ASYNC_GENERATOR
        else None
    )
    if shape is not None:
        raise TypeError(
            f"{type(model).__name__}.stream is {shape}, but stream(request) must return an "
            "async context manager of the stream at once: write it as a plain `def stream("
            "self, request)` returning an object with __aenter__ and __aexit__ (see "
            "'Your own model' in the models page)"
        )


def check_max_steps(max_steps: object) -> None:
    """An int in 1..``MAX_AGENT_STEPS`` (bool is not an int here), for the loop and
    the session alike. One run of the core loop numbers its requests
    ``request-001`` to ``request-064`` at most; an ``Agent``'s budget is per turn,
    and its request numbers run on across its turns."""
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
    number = value if type(value) is int or type(value) is float else None
    if number is None or not number > 0 or not math.isfinite(number):
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


_CLAIMED: weakref.WeakSet[trio.CancelScope] = weakref.WeakSet()
"""Scopes given to a turn (``claim_cancel_scope``) that may not have been entered yet."""


def check_cancel_scope(cancel_scope: object) -> None:
    """``TypeError``/``ValueError`` unless None or a ``trio.CancelScope`` not yet
    entered nor given to a turn (``claim_cancel_scope``)."""
    if cancel_scope is None:
        return
    if type(cancel_scope) is not trio.CancelScope:
        raise TypeError(f"cancel_scope must be a trio.CancelScope or None, got {cancel_scope!r}")
    check_scope_unused(cancel_scope)
    if cancel_scope in _CLAIMED:
        raise ValueError("cancel_scope was already given to another turn; pass a fresh one")


def check_scope_unused(cancel_scope: trio.CancelScope | None) -> None:
    """``ValueError`` if ``cancel_scope`` has been entered (a scope serves one block):
    checked when an option is given, and again when its run starts."""
    if getattr(cancel_scope, "_has_been_entered", False):
        raise ValueError("cancel_scope has already been entered; pass a fresh one")


def claim_cancel_scope(cancel_scope: trio.CancelScope | None) -> None:
    """Mark a checked ``cancel_scope`` as given to a turn: ``check_cancel_scope``
    refuses it from now on, also before the turn enters it."""
    if cancel_scope is not None:
        _CLAIMED.add(cancel_scope)


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
    from ..tools._tool import ToolRegistry

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
    """None, or something callable: a hook may be an ``async def`` or a plain one."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a function (async def, or a plain def) or None, got {value!r:.100}"
        )


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
    check_session_store(store)
    check_fsync(fsync)


def check_session_store(store: object, name: str = "store") -> None:
    """``TypeError`` naming ``name`` unless ``store`` is a ``SessionStore`` (it can
    ``create``, ``reopen`` and ``load``): a directory's name is not one."""
    for method in ("create", "reopen", "load"):
        if not callable(getattr(store, method, None)):
            raise TypeError(f"{name} must be a SessionStore, got {store!r:.200}")


def check_tool_sources(sources: object) -> tuple[ToolSource, ...]:
    """``tool_sources``: a list or tuple of objects with a ``tools()`` method (an MCP
    server, say); ``TypeError`` naming the one that is not."""
    if type(sources) not in (list, tuple):
        raise TypeError(
            f"tool_sources must be a list or tuple of tool sources, got {type(sources).__name__}"
            " (pass [source])"
        )
    given: Sequence[object] = sources  # type: ignore[assignment]  # a list or tuple
    for index, source in enumerate(given):
        if not callable(getattr(source, "tools", None)):
            raise TypeError(f"tool_sources[{index}] has no tools() method: {source!r:.80}")
    return tuple(given)  # type: ignore[arg-type]  # each has tools()


def check_sources_ready(sources: Sequence[ToolSource]) -> None:
    """Each tool source can list its tools now; what one raises when it cannot (an
    MCP server never entered: ``RuntimeError``) propagates, before a run starts."""
    for source in sources:
        source.tools()


def registry_of(tools: object) -> ToolRegistry:
    """The registry an ``Agent`` runs with: ``tools`` itself when it is a
    ``ToolRegistry`` (later registrations reach later turns), a new one for
    None, or one built from an iterable of ``Tool`` (a duplicate name:
    ``ValueError``; an item that is not a ``Tool``: ``TypeError`` naming its
    index)."""
    if tools is None:
        return ToolRegistry()
    if type(tools) is ToolRegistry:
        return tools
    if type(tools) is Tool:
        raise TypeError("tools must be a ToolRegistry or an iterable of Tool: pass [tool]")
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise TypeError(
            f"tools must be a ToolRegistry, an iterable of Tool or None, got {type(tools).__name__}"
        )
    items = list(tools)
    for index, item in enumerate(items):
        if type(item) is not Tool:
            hint = " (decorate the function with @tool)" if callable(item) else ""
            raise TypeError(f"tools[{index}] must be a Tool, got {type(item).__name__}{hint}")
    return ToolRegistry(items)


MAX_METADATA_BYTES: Final = 65536
"""Bytes of a session's metadata as JSON, at most (it is run configuration)."""


def _plain_json(value: Any, path: str, depth: int) -> Any:
    """A copy of ``value`` if it is plain JSON (the types ``check_arguments``
    allows, exactly), else ``ValueError`` naming where it is not."""
    kind = type(value)
    if kind is str:
        if not is_valid_unicode(value):
            raise ValueError(f"metadata at `{path}`: string is not valid Unicode")
        return value
    if kind is float and not math.isfinite(value):
        raise ValueError(f"metadata at `{path}`: number {value!r} is not finite")
    if kind is int and not -(2**63) <= value <= 2**64 - 1:
        raise ValueError(f"metadata at `{path}`: integer is outside the 64-bit range")
    if kind in (bool, int, float) or value is None:
        return value
    if kind not in (dict, list):
        raise ValueError(f"metadata at `{path}`: a {kind.__name__} is not plain JSON")
    if depth > MAX_ARGUMENT_DEPTH:
        raise ValueError(f"metadata at `{path}`: nested deeper than {MAX_ARGUMENT_DEPTH}")
    if kind is list:
        return [_plain_json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    for key in value:
        if type(key) is not str or not is_valid_unicode(key):
            raise ValueError(f"metadata at `{path}`: key {key!r} is not a valid str")
    return {k: _plain_json(v, f"{path}.{k}", depth + 1) for k, v in value.items()}


def check_metadata(metadata: object) -> dict[str, Any] | None:
    """A private copy of ``metadata``: None, or a mapping with str keys whose
    values are plain JSON as ``check_arguments`` defines it (exact types, finite
    numbers, valid Unicode), at most ``MAX_METADATA_BYTES`` as JSON; the tool
    arguments' size limits do not apply (a system prompt may be long). Else
    ``TypeError``/``ValueError`` naming the offending value by its path."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(
            "metadata must be a mapping of str keys to plain JSON, or None, "
            f"got {type(metadata).__name__}"
        )
    copy: dict[str, Any] = _plain_json(dict(metadata), "$", 1)
    size = len(msgspec.json.encode(copy))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes as JSON, more than {MAX_METADATA_BYTES}")
    return copy


def check_agent_name(name: object) -> str | None:
    """``Agent(name=)``: None, or a short printable name (1 to 128 characters)."""
    if name is None:
        return None
    if type(name) is not str or not 0 < len(name) <= 128 or not name.isprintable():
        raise ValueError(f"name must be 1 to 128 printable characters, got {name!r:.140}")
    return name
