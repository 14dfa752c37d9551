"""The ``Tool`` value, the ``@tool`` decorator and ``ToolRegistry``
(``execute_tool_call``, which runs a model's call with them, is ``_execute``'s).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    Literal,
    Protocol,
    final,
    overload,
    runtime_checkable,
)

import attrs
import msgspec
import trio

from ..limits import REJECTED_ARGUMENTS as REJECTED_ARGUMENTS
from ..messages._ir import InputBlock
from ..model import ToolSpec
from ._arguments import Arguments, arguments_of
from ._context import MAX_PROGRESS_TEXT as MAX_PROGRESS_TEXT
from ._context import PROGRESS_INTERVAL as PROGRESS_INTERVAL
from ._context import ToolContext as ToolContext
from ._context import is_context_type
from ._context import tool_context as tool_context
from ._frozen import frozen_json, is_json_object
from ._types import TypeMismatch

__all__ = [
    "TOOL_EFFECTS",
    "REJECTED_ARGUMENTS",
    "ToolEffect",
    "FatalToolError",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSource",
    "tool",
    "tool_context",
]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")

if TYPE_CHECKING:  # defaults (PEP 696) let a hand-built ``Tool(...)`` be ``Tool[..., Any]``
    from typing_extensions import ParamSpec, TypeVar

    P = ParamSpec("P", default=...)
    R = TypeVar("R", default=Any)
else:
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")


class ToolResult(msgspec.Struct, frozen=True, gc=False):
    """What a tool may return to say exactly what the model sees: text, or text,
    image and document blocks, and whether it reports an error.

    ``return ToolResult((TextBlock("the chart:"), ImageBlock("image/png", data=png)))``.
    (A tool may also return one block, or a list of blocks, for ``is_error=False``.)
    """

    content: str | tuple[InputBlock, ...]
    is_error: bool = False


class ToolError(Exception):
    """Raise from a tool for a failure the model should see and may recover from."""


class ToolArgumentsError(ToolError):
    """Arguments that do not fit the tool's parameters; the message carries the JSON path."""


class FatalToolError(Exception):
    """Raise from a tool to end the whole run as failed (``TOOL_FATAL``)."""


def _check_name(_: object, __: object, name: Any) -> None:
    if type(name) is not str or not _NAME.match(name):
        raise ValueError(f"tool name must be 1 to 64 letters, digits, '_' or '-', got {name!r}")


def _check_type(expected: type) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """A validator saying in one line what the field must be (attrs' own raises a
    tuple of its internals)."""

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, expected):
            raise TypeError(
                f"tool {attribute.name} must be a {expected.__name__}, got {value!r:.80}"
            )

    return check


def _check_parameters(_: object, __: object, parameters: Any) -> None:
    if not is_json_object(parameters):  # a spec's read-only schema too: tools can be rebuilt
        raise TypeError(f"tool parameters must be a JSON Schema dict, got {parameters!r}")
    try:
        msgspec.json.encode(parameters)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool parameters must be JSON-encodable: {exc}") from None


ApprovalRule = bool | Callable[[Mapping[str, Any]], bool]
"""``requires_approval``: every call (True), none (False), or those for whose
arguments the function returns True."""


def _check_approval_rule(_: object, __: object, rule: Any) -> None:
    if type(rule) is not bool and not callable(rule):
        raise TypeError(
            f"requires_approval must be a bool or a function of the arguments, got {rule!r}"
        )
    if inspect.iscoroutinefunction(rule) or inspect.isasyncgenfunction(rule):
        # Its call would give a coroutine, not a bool: the turn failed at the first
        # call with HOOK_ERROR and a "never awaited" warning. Agent(approval=) is
        # the place for an async rule.
        raise TypeError(
            f"requires_approval must be a plain function (def) of the arguments returning a "
            f"bool, got the async function {getattr(rule, '__qualname__', rule)!r}; for a "
            "rule that awaits, pass Agent(approval=...), which may be async"
        )


ToolEffect = Literal["once", "idempotent", "pure"]
"""What running a tool call twice does (``@tool(effect=...)``), for a call whose
process died before its result was recorded: ``"once"`` (the default) may not be
run again, so a resume answers it ``TOOL_OUTCOME_UNKNOWN``; ``"idempotent"``
(running it again with the same ``ToolContext.idempotency_key`` changes nothing
more) and ``"pure"`` (it changes nothing) are run again on resume."""
TOOL_EFFECTS: tuple[ToolEffect, ...] = ("once", "idempotent", "pure")


def _check_effect(_: object, __: object, effect: Any) -> None:
    if type(effect) is not str or effect not in TOOL_EFFECTS:
        raise ValueError(f"effect must be 'once', 'idempotent' or 'pure', got {effect!r:.80}")


def _check_execute(_: object, __: object, execute: Any) -> None:
    if not (
        inspect.iscoroutinefunction(execute)
        or inspect.iscoroutinefunction(getattr(execute, "__call__", None))  # noqa: B004
    ):
        raise TypeError(f"tool execute must be an async function, got {execute!r}")


@final
@attrs.frozen
class Tool(Generic[P, R]):
    """A tool the model can call.

    ``execute`` is an async callable taking the call's arguments (a private
    plain-JSON dict) and returning a ``str`` (the result text) or any value
    msgspec can JSON-encode. It raises ``ToolError`` for an error the model
    should see, or ``FatalToolError`` to end the run. A ``Tool`` built by
    hand gets no argument validation beyond plain JSON; ``@tool`` validates
    against the function's signature.

    A tool made by ``@tool`` is generic in the decorated function's
    parameters and return type, and calling it calls that function
    (``await add(1, 2)``), so type checkers and tests see the function as
    written; ``function`` is that function (None for a tool built by hand).
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=_check_type(str))
    parameters: dict[str, Any] = attrs.field(validator=_check_parameters)
    execute: Callable[[dict[str, Any]], Awaitable[Any]] = attrs.field(
        validator=_check_execute, repr=False
    )
    exclusive: bool = attrs.field(default=False, validator=_check_type(bool))
    """Runs alone in a parallel batch: calls before it finish first, calls after it wait."""
    progress: bool = attrs.field(default=False, validator=_check_type(bool))
    """Reports progress through ``tool_context().report(...)`` (``tool.updated`` events)."""
    requires_approval: ApprovalRule = attrs.field(default=False, validator=_check_approval_rule)
    """An ``Agent`` holds each call until a person approves it (``agent.approve``):
    True for every call, or a function of the call's arguments saying which."""
    effect: ToolEffect = attrs.field(default="once", validator=_check_effect)
    """What running a call twice does: ``"once"``, ``"idempotent"`` or ``"pure"``
    (see ``ToolEffect``): whether a resume runs again a call whose outcome is unknown."""
    function: Callable[P, R] | None = attrs.field(default=None, eq=False, repr=False)
    """The function ``@tool`` built this tool from; None for a tool built by hand."""

    _spec: ToolSpec = attrs.field(init=False, eq=False, repr=False)
    _arguments: Arguments | None = attrs.field(init=False, default=None, eq=False, repr=False)

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a call with ``arguments`` waits for a person's approval
        (``requires_approval``); ``TypeError`` if its function answers not a bool."""
        rule = self.requires_approval
        if type(rule) is bool:
            return rule
        assert callable(rule)
        answer = rule(arguments)
        if type(answer) is not bool:
            raise TypeError(f"requires_approval of {self.name!r} returned {answer!r}, not a bool")
        return answer

    def __attrs_post_init__(self) -> None:
        # A tool is a value fixed when it is built: later changes to the schema
        # dict it was given reach neither ``parameters`` nor the spec.
        object.__setattr__(self, "parameters", copy_json(self.parameters))
        spec = ToolSpec(self.name, self.description, frozen_json(self.parameters))
        object.__setattr__(self, "_spec", spec)

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """``ToolArgumentsError`` (with the JSON path) if ``arguments`` do not fit a
        ``@tool``'s parameters, as its call would find; a tool built by hand checks
        its own arguments when it runs, so nothing is checked here for it."""
        if self._arguments is not None:
            try:
                self._arguments.convert(arguments)
            except TypeMismatch as exc:
                raise ToolArgumentsError(str(exc)) from None

    def spec(self) -> ToolSpec:
        """The ``ToolSpec`` the model sees. Built once per tool and shared by every
        request of every run (none holds a copy of its own), so its schema is
        read-only: a change in place raises ``TypeError``."""
        return self._spec

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the decorated function directly (no validation, no events): for tests
        and for code that wants the plain function back."""
        if self.function is None:
            raise TypeError(
                f"tool {self.name!r} was built by hand: run it with "
                "execute_tool_call() or await tool.execute(arguments)"
            )
        return self.function(*args, **kwargs)


def copy_json(value: Any) -> Any:
    """A plain-JSON copy of ``value`` of its own (a tool's arguments, its schema)."""
    return msgspec.json.decode(msgspec.json.encode(value))


_TOOL_THREADS = trio.CapacityLimiter(40)
"""The worker threads of plain ``def`` tools: a limiter of their own, so tools that
block never starve the library's own thread work (creating and loading ledgers)."""


def _kind_of(function: object) -> str:
    """``"async"`` or ``"sync"``: how a tool function runs; ``TypeError`` for what cannot.

    A plain ``def`` that wraps an async function (a decorator with
    ``functools.wraps``) returns a coroutine: it is awaited, not put in a thread."""
    inner = inspect.unwrap(function) if callable(function) else function
    if any(
        inspect.isasyncgenfunction(f) or inspect.isgeneratorfunction(f) for f in (function, inner)
    ):
        raise TypeError(f"@tool needs a function that returns its result, got {function!r}")
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(inner):
        return "async"
    if inspect.isclass(function) or not callable(function):
        raise TypeError(f"@tool needs a function (async def or def), got {function!r}")
    return "sync"


_CONTEXT_NAMES: Final = frozenset({"ctx", "context", "run_context"})
"""Names a parameter left without an annotation is refused under: a context
meant, not an argument."""


def _arguments_fields(
    function: Callable[..., Any], tool_name: str
) -> tuple[list[tuple[Any, ...]], str | None]:
    """The parameters the model's arguments are validated against, as
    ``(name, annotation[, default])``, and the parameter that receives the
    ``ToolContext`` (if any)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"@tool: cannot read the signature of {function!r}: {exc}") from None
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"@tool: cannot resolve the annotations of {function.__qualname__}: {exc} "
            "(types named in string annotations must be importable from its module)"
        ) from None
    fields: list[tuple[Any, ...]] = []
    context_name: str | None = None
    for parameter in signature.parameters.values():
        if is_context_type(hints.get(parameter.name)):
            if context_name is not None:
                raise TypeError(
                    f"@tool: {function.__qualname__} takes two ToolContext parameters "
                    f"({context_name!r} and {parameter.name!r}); a call has one context"
                )
            context_name = parameter.name  # injected, not an argument the model sees
            continue
        if parameter.name in _CONTEXT_NAMES and parameter.name not in hints:
            # pydantic-ai's habit (``ctx: RunContext``, left bare): it would become an
            # argument of any JSON the model must send, and every call would fail
            raise TypeError(
                f"@tool: parameter {parameter.name!r} of {function.__qualname__} has no "
                f"annotation: annotate it `{parameter.name}: ToolContext` (or "
                "`ToolContext[MyDeps]`) to receive the call's context, or give it a type "
                "if the model is to send it"
            )
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"@tool: {function.__qualname__} cannot take *args or **kwargs")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"@tool: parameter {parameter.name!r} of {function.__qualname__} is "
                "positional-only; tool arguments are passed by name"
            )
        annotation = hints.get(parameter.name, Any)
        if annotation is object:
            annotation = Any
        if parameter.default is parameter.empty:
            fields.append((parameter.name, annotation))
        else:
            fields.append((parameter.name, annotation, parameter.default))
    return fields, context_name


def _build_tool(
    function: Callable[P, R],
    name: str | None,
    description: str | None,
    exclusive: bool,
    requires_approval: ApprovalRule = False,
    effect: ToolEffect = "once",
) -> Tool[P, R]:
    kind = _kind_of(function)
    tool_name = getattr(function, "__name__", "") if name is None else name
    _check_name(None, None, tool_name)  # before the name is used to build a Struct
    fields, context_name = _arguments_fields(function, tool_name)
    checked = arguments_of(function, tool_name, fields)
    call: Callable[..., Any] = function

    async def execute(arguments: dict[str, Any]) -> Any:
        try:
            kwargs = checked.convert(arguments)
        except TypeMismatch as exc:
            raise ToolArgumentsError(str(exc)) from None
        if context_name is not None:
            kwargs[context_name] = tool_context()
        if kind == "async":
            return await call(**kwargs)
        # a thread cannot be interrupted: cancellation waits for it (trio refuses,
        # with a TypeError the model sees, a plain def that returns a coroutine)
        return await trio.to_thread.run_sync(
            functools.partial(call, **kwargs), limiter=_TOOL_THREADS
        )

    doc = inspect.getdoc(function) or ""
    built = Tool(
        name=tool_name,
        description=doc if description is None else description,
        parameters=checked.parameters,
        execute=execute,
        exclusive=exclusive,
        progress=context_name is not None,
        function=function,
        requires_approval=requires_approval,
        effect=effect,
    )
    object.__setattr__(built, "_arguments", checked)
    return built


@runtime_checkable
class ToolSource(Protocol):
    """Where tools come from besides a registry (an MCP server): ``tools()`` gives
    the current list, read again before every step (never during a batch)."""

    def tools(self) -> Sequence[Tool[..., Any]]: ...


class _ToolDecorator(Protocol):
    def __call__(self, function: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(function: Callable[P, R], /) -> Tool[P, R]: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    exclusive: bool = False,
    requires_approval: ApprovalRule = False,
    effect: ToolEffect = "once",
) -> _ToolDecorator: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    exclusive: bool = False,
    requires_approval: ApprovalRule = False,
    effect: ToolEffect = "once",
) -> Tool[..., Any] | _ToolDecorator:
    """Build a ``Tool`` from a function: ``async def``, or a plain ``def``.

    The name is the function's, the description its docstring, the
    parameters a JSON Schema built by msgspec from the signature (``Any``
    and ``object`` accept any JSON value; ``Annotated[..., msgspec.Meta(...)]``
    adds constraints and descriptions). Arguments are validated with msgspec
    before the call; a mismatch is a ``ToolArgumentsError`` whose message has
    the JSON path (``Expected `int`, got `str` - at `$.left```).
    A parameter annotated ``ToolContext`` (or ``ToolContext[MyDeps]``) is not an
    argument: it receives the call's context (``ctx.deps``, the turn's
    dependencies; ``ctx.report(...)`` for progress). ``exclusive=True``
    makes the tool run alone in a parallel batch; ``requires_approval=True``
    makes an ``Agent`` hold each call until a person approves it (a function of
    the arguments instead holds the calls it returns True for). ``effect`` says
    what running a call twice does: ``"once"`` (the default: a call whose
    process died mid-call is never run again), ``"idempotent"`` (it passes
    ``ctx.idempotency_key`` to an API that deduplicates) or ``"pure"`` (it
    changes nothing); a resume runs those two again. Use as
    ``@tool`` or ``@tool(name=..., description=..., exclusive=...)``. The result is a
    ``Tool`` that keeps the function's signature for type checkers, and
    calling it calls the function.

    A plain ``def`` runs in a worker thread (``trio.to_thread.run_sync``), so
    it never blocks the event loop. Cancellation: Python cannot interrupt a
    thread, so a cancelled call runs to its end; like any tool that finished,
    its result is recorded, and then the run ends as cancelled. Where calls
    run as tasks (``tool_execution="parallel"``, or a tool that takes a
    ``ToolContext``) the batch waits for it at most ``tool_grace_period``,
    then leaves it to finish in the background with its outcome unknown.
    Blocking work that must stop on cancellation belongs in an ``async def``.
    """
    _check_approval_rule(None, None, requires_approval)
    _check_effect(None, None, effect)
    if function is not None:
        return _build_tool(function, name, description, exclusive, requires_approval, effect)

    def decorate(f: Callable[..., Any], /) -> Tool[..., Any]:
        return _build_tool(f, name, description, exclusive, requires_approval, effect)

    return typing.cast(_ToolDecorator, decorate)


@final
class ToolRegistry:
    """Tools by name. A run snapshots the registry when it starts."""

    # Copy on write: ``copy()`` (a run's snapshot, once per turn) shares the dict
    # until either side registers; the specs tuple is built once per change.
    __slots__ = ("_ruled", "_shared", "_specs", "_tools")

    def __init__(self, tools: Iterable[object] = ()) -> None:
        # Iterable[object]: a checker joins tools of different signatures to object
        # (``[async_tool, def_tool]`` is a list[object]); register() checks each one.
        self._tools: dict[str, Tool] = {}
        self._shared = False
        self._specs: tuple[ToolSpec, ...] | None = None
        self._ruled: bool | None = None  # some tool has an approval rule (None: not known)
        for item in tools:
            self.register(typing.cast(Tool, item))  # checked there

    def register(self, tool: Tool) -> None:
        """Add ``tool``: ``ValueError`` if the name is taken, ``TypeError`` if not a ``Tool``."""
        if type(tool) is not Tool:
            raise TypeError(f"register() takes a Tool, got {type(tool).__name__}")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        if self._shared:
            self._tools, self._shared = dict(self._tools), False
        self._tools[tool.name] = tool
        self._specs = self._ruled = None

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The specs of all tools, in registration order."""
        if self._specs is None:
            self._specs = tuple(t.spec() for t in self._tools.values())
        return self._specs

    def has_approval_rules(self) -> bool:
        """Whether a tool's ``requires_approval`` is not False (asked once a batch;
        kept until the next ``register``: a ``Tool`` is frozen)."""
        if self._ruled is None:
            self._ruled = any(t.requires_approval is not False for t in self._tools.values())
        return self._ruled

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"

    def copy(self) -> ToolRegistry:
        """A registry with the same tools that later ``register`` calls on either do not affect."""
        self._shared = True
        cls = type(self)  # the specs made once, here, for every copy to share
        return cls._sharing(self._tools, self.specs(), self._ruled)

    @classmethod
    def _sharing(
        cls, tools: dict[str, Tool], specs: tuple[ToolSpec, ...] | None, ruled: bool | None
    ) -> ToolRegistry:
        """A registry over ``tools`` that copies them before it changes them."""
        self = cls()
        self._tools, self._specs, self._ruled = tools, specs, ruled
        self._shared = True
        return self
