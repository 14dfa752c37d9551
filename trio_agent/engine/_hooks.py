"""What a turn runs with, and what it calls out to: ``TurnSpec`` (built once,
the same way, by the loop and the session), ``TurnState``, and the
``StepHooks`` extension points with their defaults (the core contract).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, final

import attrs
import trio

from .._log import TOOLS
from .._settings import ModelSettings
from ..errors import HOOK_ERROR, StepError, describe
from ..messages._ir import AssistantMessage, Message, ToolCall, ToolResultMessage
from ..model import Model, ModelRequest, ToolSpec, Usage
from ..output._spec import OutputSlot, OutputSpec, check_output_tool
from ..tools._tool import ToolRegistry, ToolSource
from ._fallback import FallbackModel

if TYPE_CHECKING:
    from ..telemetry._observe import Observer
    from ._transcript import Conversation


__all__ = [
    "DEFAULT_HOOKS",
    "StepHooks",
    "TurnSpec",
    "TurnState",
    "build_spec",
    "step_spec",
    "call_hook",
]


@final
@attrs.define(eq=False)
class TurnState:
    """What a turn has done so far; hooks and policies read it."""

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    last_stop_reason: str | None = None
    hit_length: bool = False
    # refusal or content_filter if a step ended so, else length if one did: the
    # turn's end reason however later steps stop (a refusal outranks a length stop)
    sticky_stop: str | None = None
    last_message: AssistantMessage | None = None
    fallback_usage: list[tuple[Model, Usage]] | None = None
    """When a ``FallbackModel`` runs the turn: each answer's usage, with the model
    that gave it (None otherwise: all of it is the turn's model's)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@final
@attrs.frozen(eq=False)
class TurnSpec:
    """What a turn runs with: the model, a snapshot of the tools, and its step budget."""

    model: Model
    tools: ToolRegistry
    specs: tuple[ToolSpec, ...]
    system: str
    max_steps: int
    tool_execution: Literal["sequential", "parallel"] = "sequential"
    max_parallel_tools: int = 10
    tool_grace_period: float = 5.0
    settings: ModelSettings | None = None
    output: OutputSlot | None = None
    """The turn's typed answer so far (``output_type=``), None for plain text."""
    sources: tuple[ToolSource, ...] = ()
    """Where more tools come from (``tool_sources=``), read before every step."""
    observer: Observer | None = None
    """The turn's spans and debug log (``_observe``); None when nothing observes it."""
    deps: Any = None
    """What the turn was given as ``deps=``: its tools read it as ``ctx.deps``. Never
    recorded, never copied."""
    fallback: FallbackModel | None = None
    """``model`` when it is a ``FallbackModel``: each attempt is then one of its models'."""
    session_key: str | SessionKey = ""
    """What a call's ``ToolContext.idempotency_key`` begins with: the session's id (a
    session without a store: its agent's own id; a bare run: the run's), or what
    makes it when a call first needs it (``SessionKey``)."""


class SessionKey(Protocol):
    """Makes a session's key when a call first needs it (an id made for a session
    without a store costs nothing until then), the same every time after."""

    def session_key(self) -> str: ...


@final
class RunKey:
    """A bare run's key: ``run-`` and a fresh id, made when first asked for."""

    __slots__ = ("_key",)

    def __init__(self) -> None:
        self._key: str | None = None

    def session_key(self) -> str:
        if self._key is None:
            self._key = f"run-{uuid.uuid4().hex}"
        return self._key


def key_of(spec: TurnSpec) -> str:
    """The spec's session key, made now if it is still to be made."""
    key = spec.session_key
    return key if type(key) is str else key.session_key()  # type: ignore[union-attr]


def build_spec(
    model: Model,
    tools: ToolRegistry,
    system: str,
    max_steps: int,
    tool_execution: Literal["sequential", "parallel"] = "sequential",
    max_parallel_tools: int = 10,
    tool_grace_period: float = 5.0,
    settings: ModelSettings | None = None,
    output: OutputSpec | None = None,
    sources: tuple[ToolSource, ...] = (),
    deps: Any = None,
    session_key: str | SessionKey = "",
) -> TurnSpec:
    """The spec of a turn: a snapshot of ``tools`` (later registrations do not reach
    the turn) with their specs, and the options, as the loop and the session give them.
    With an ``output`` in tool mode, the snapshot also holds the output tool."""
    registry = tools.copy()
    slot = None if output is None else OutputSlot(output)
    if output is not None and output.tool is not None:
        check_output_tool(tools)
        registry.register(output.tool)
    return TurnSpec(
        model=model,
        tools=registry,
        specs=registry.specs(),
        system=system,
        max_steps=max_steps,
        tool_execution=tool_execution,
        max_parallel_tools=max_parallel_tools,
        tool_grace_period=float(tool_grace_period),
        settings=settings,
        output=slot,
        sources=sources,
        deps=deps,
        fallback=model if type(model) is FallbackModel else None,
        session_key=session_key,
    )


def step_spec(spec: TurnSpec) -> TurnSpec:
    """The spec one step runs with: with ``tool_sources``, the turn's tools and
    each source's current list (a name already taken keeps its first tool), read
    now, so a batch never sees a list change under it; else ``spec`` itself."""
    if not spec.sources:
        return spec
    registry = spec.tools.copy()
    for source in spec.sources:
        for tool in source.tools():
            if tool.name not in registry:
                registry.register(tool)
            elif (id(source), tool.name) not in _CLASHES_TOLD:
                _tell_clash(source, tool.name)
    return attrs.evolve(spec, tools=registry, specs=registry.specs())


_CLASHES_TOLD: set[tuple[int, str]] = set()
"""The (source, name) clashes already logged: once each, not at every step."""
_MAX_CLASHES_TOLD: Final = 1024


def _tell_clash(source: ToolSource, name: str) -> None:
    if len(_CLASHES_TOLD) >= _MAX_CLASHES_TOLD:
        _CLASHES_TOLD.clear()
    _CLASHES_TOLD.add((id(source), name))
    TOOLS.warning(
        "tool %r of %s is not offered: an earlier tool has that name (give the source a prefix)",
        name,
        getattr(source, "label", type(source).__name__),
    )


class StepHooks:
    """Extension points of ``run_turn``; these defaults are the core contract.

    Override in a subclass. ``has_input``/``take_input`` are synchronous so
    that nothing is taken from a queue unless it is appended at once.
    """

    __slots__ = ()  # a subclass may keep its state in slots (one per turn)

    # The turn's plan, read once a step or a call: a hook is awaited only when it
    # can do something. For a subclass each is true when it overrides the hook; a
    # subclass that knows better (a session's hooks, per turn) keeps its own in a
    # slot of the same name. The core's defaults do nothing: all false.
    prepares_requests: bool = False
    """Whether ``prepare_request`` is called (else the request is sent as made)."""
    gates_calls: bool = False
    """Whether ``before_tool_call`` is called (else every call runs)."""
    checks_steps: bool = False
    """Whether ``after_step`` is called (else the turn goes on)."""
    reviews_results: bool = False
    """Whether ``after_tool_call`` is called (else a call's result is kept as it is)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for flag, hook in _PLANNED:
            if flag not in cls.__dict__:  # a slot or a value of the subclass's own
                setattr(cls, flag, getattr(cls, hook) is not getattr(StepHooks, hook))

    def has_input(self, stop_reason: str) -> bool:
        """Whether queued input would continue the turn after a step."""
        return False

    def may_hold(self, calls: Sequence[ToolCall], spec: TurnSpec) -> bool:
        """Whether any of ``calls`` may need approval (a cheap test, before ``hold_calls``)."""
        return False

    async def hold_calls(self, calls: Sequence[ToolCall], spec: TurnSpec) -> frozenset[str]:
        """The ids of the calls to hold for a person's approval (recorded and
        announced here); they are not run, and the turn ends awaiting approval."""
        return frozenset()

    def still_open(self) -> frozenset[str]:
        """Calls that may stay unanswered after a batch: those held for approval."""
        return frozenset()

    def awaiting_approval(self) -> object | None:
        """The turn's end when calls of the last step wait for approval, else None."""
        return None

    def take_input(self, stop_reason: str) -> Sequence[Message]:
        """Take the queued input that continues the turn (appended at once)."""
        return ()

    async def prepare_request(
        self, request: ModelRequest, conversation: Conversation
    ) -> ModelRequest:
        """The request to send, once per step, before any attempt."""
        return request

    def retry_delay(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before another attempt after ``error``, or None to fail."""
        return None

    async def before_tool_call(self, call: ToolCall) -> str | None:
        """A reason to block ``call`` (it becomes an error result), or None to run it."""
        return None

    async def after_tool_call(self, call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        """The result to record for ``call``."""
        return result

    async def after_step(self, state: TurnState) -> object | None:
        """Called when the turn would go on; anything but None stops it with that value."""
        return None

    def result_kept(self, call: ToolCall, result: ToolResultMessage) -> None:
        """``call``'s result as the turn keeps it (after ``after_tool_call``, if it
        was asked): synchronous, for what a turn counts of its calls."""

    def finalize_result(self, result: ToolResultMessage) -> ToolResultMessage:
        """The form in which every tool result is stored (also when a hook failed)."""
        return result


_PLANNED: Final = (
    ("prepares_requests", "prepare_request"),
    ("gates_calls", "before_tool_call"),
    ("checks_steps", "after_step"),
    ("reviews_results", "after_tool_call"),
)

DEFAULT_HOOKS = StepHooks()
"""The core contract: no inbox, no retries, no hooks. Checked by identity on hot
paths (``hooks is DEFAULT_HOOKS``), so the core pays for no hook call."""


async def call_hook(name: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, awaited when it returns an awaitable (a hook is an async
    function, or a plain one, called on the trio thread); an exception from it
    fails the turn as ``HOOK_ERROR`` naming ``name`` (cancellation propagates,
    also when the hook turned it into an error)."""
    try:
        returned = call(*args)
        if inspect.isawaitable(returned):
            returned = await returned
        return returned
    except StepError:
        raise
    except Exception as exc:
        await trio.lowlevel.checkpoint_if_cancelled()
        raise StepError(HOOK_ERROR, f"hook {name} raised {describe(exc)}", exc) from exc
