"""The session's side of a turn: its frozen ``SessionPolicy``, its ``Inbox`` of
queued input, and the ``SessionHooks`` that read both (never the ``Agent``)."""

from __future__ import annotations

import random
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, final

import attrs
import msgspec

from .._settings import ModelSettings, check_run_settings, check_settings, merge_settings
from ..engine._approvals import ApprovalPolicy, Approvals, hold_for_approval, rejection
from ..engine._emit import Emitter, Journal
from ..engine._hooks import StepHooks, TurnSpec, TurnState, build_spec, call_hook
from ..engine._options import (
    check_int,
    check_max_steps,
    check_optional_hook,
    check_system,
    check_tool_execution,
)
from ..engine._transcript import Conversation, validate
from ..errors import CONTEXT_OVERFLOW, HOOK_ERROR, StepError, describe, leaves
from ..events import (
    ContextCompacted,
    TurnAwaitingApproval,
    TurnBlocked,
    TurnEnd,
    TurnRepeatedFailure,
    TurnTokenBudget,
)
from ..ledger._records import LedgerError
from ..limits import OUTPUT_TOOL_NAME
from ..messages._ir import (
    INTERRUPTED_RESULT_TEXT,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    UserMessage,
    tool_result,
)
from ..model import Model, ModelRequest
from ..output._spec import OutputSpec, offered
from ..telemetry._pricing import Price, check_prices
from ..tools._tool import ToolRegistry, ToolSource
from ._retry import DEFAULT_RETRY, RetryPolicy, estimate_tokens, truncate_content

__all__ = [
    "BUSY",
    "POLICY_OPTIONS",
    "RESERVED_PREFIXES",
    "RESUMED_OPTIONS",
    "Inbox",
    "SessionHooks",
    "SessionPolicy",
    "ToolBlocked",
    "block",
    "closed_message",
    "drain",
    "interrupted_results",
    "ledger_failure",
    "new_id",
    "owes_reply",
]

RESERVED_PREFIXES = ("message-", "tool-result-", "output-retry-")
"""Id prefixes of the messages the loop makes; input messages may not use them."""

RESUMED_OPTIONS = (
    *("tools", "settings", "max_steps", "retry", "max_turn_tokens", "max_repeated_failures"),
    *("context_window", "reserve_output_tokens", "count_tokens", "max_tool_result_chars"),
    *("transform_context", "before_tool_call", "after_tool_call", "should_stop_turn"),
    *("compact", "seed", "tool_execution", "max_parallel_tools", "tool_grace_period"),
    *("output_type", "output_mode", "output_retries", "output_validator", "approval"),
    *("tool_sources", "prices", "name"),
)
"""The options ``Agent.resume`` passes on to ``Agent()`` as they are."""

BUSY = "this Agent is already running a turn; use steer() or follow_up()"


def closed_message(session_id: str, recorded: bool) -> str:
    """Why a turn of an ``Agent`` whose session ``aclose()`` closed is refused."""
    if recorded:
        return (
            f"this Agent's session {session_id!r} is closed; resume it with "
            f"Agent.resume(store, {session_id!r})"
        )
    return (
        f"this Agent was closed before its session {session_id!r} was created (nothing "
        "was recorded); make a new Agent"
    )


def ledger_failure(error: BaseException) -> LedgerError | None:
    """The ledger's own failure in ``error`` (bare or in a group), if any."""
    return next((e for e in leaves(error) if isinstance(e, LedgerError)), None)


TransformContext = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]]]
BeforeToolCall = Callable[[ToolCall], Awaitable["ToolBlocked | None"]]
AfterToolCall = Callable[[ToolCall, ToolResultMessage], Awaitable[ToolResultMessage]]
ShouldStopTurn = Callable[[TurnState], Awaitable[bool]]
Compact = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]]]
CountTokens = Callable[[ModelRequest], int]


@final
@attrs.frozen
class ToolBlocked:
    """What ``before_tool_call`` returns to stop a call; build it with ``block(reason)``."""

    reason: str


def block(reason: str) -> ToolBlocked:
    """Block a tool call: it does not run, and the model sees ``reason`` as an error result."""
    if type(reason) is not str:
        raise TypeError(f"block() takes a str reason, got {reason!r}")
    return ToolBlocked(reason)


@final
@attrs.frozen
class SessionPolicy:
    """How an ``Agent`` runs its turns, checked once (``build``) and then fixed: the
    step budget, retries, budgets, the context guard, the hooks and the
    tool-batch options. (The model and the tools are the Agent's own.)

    A value: agents built with the same options share one policy object
    (``build`` interns it), so a thousand agents cost one, not a thousand.
    """

    system: str
    max_steps: int
    retry: RetryPolicy
    seed: int | None
    max_turn_tokens: int | None
    max_repeated_failures: int | None
    context_window: int | None
    reserve_output_tokens: int
    count_tokens: CountTokens
    max_tool_result_chars: int | None
    transform_context: TransformContext | None
    before_tool_call: BeforeToolCall | None
    after_tool_call: AfterToolCall | None
    should_stop_turn: ShouldStopTurn | None
    compact: Compact | None
    approval: ApprovalPolicy | None
    tool_execution: Literal["sequential", "parallel"]
    max_parallel_tools: int
    tool_grace_period: float
    settings: ModelSettings | None
    prices: Mapping[str, Price] | None

    @classmethod
    def build(cls, **options: Any) -> SessionPolicy:
        """Check every option (``TypeError``/``ValueError`` naming it), then fix them."""
        check_system(options["system"])
        check_tool_execution(
            options["tool_execution"], options["max_parallel_tools"], options["tool_grace_period"]
        )
        # as the loop's: per turn here, while request numbers run on across turns
        check_max_steps(options["max_steps"])
        check_int("reserve_output_tokens", options["reserve_output_tokens"], 0)
        for name in ("max_turn_tokens", "max_repeated_failures", "context_window"):
            check_int(name, options[name], 1, optional=True)
        limit = options["max_tool_result_chars"]
        if limit is not None and (type(limit) is not int or limit < 200):
            raise ValueError(
                "max_tool_result_chars must be None or an int >= 200 (room for the cut marker), "
                f"got {limit!r}"
            )
        seed = options["seed"]
        if seed is not None and type(seed) not in (int, float, str, bytes):
            raise TypeError(f"seed must be None, an int, a float, a str or bytes, got {seed!r}")
        retry = options["retry"]
        if retry is not None and type(retry) is not RetryPolicy:
            raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if not callable(options["count_tokens"]):
            raise TypeError(f"count_tokens must be callable, got {options['count_tokens']!r}")
        for name in (
            "transform_context",
            "before_tool_call",
            "after_tool_call",
            "should_stop_turn",
            "compact",
            "approval",
        ):
            check_optional_hook(name, options[name])
        policy = cls(
            **{
                **options,
                "retry": DEFAULT_RETRY if retry is None else retry,
                "tool_grace_period": float(options["tool_grace_period"]),
                "settings": check_settings(options["settings"]),
                "prices": check_prices(options["prices"]),
            }
        )
        key = _sharing_key(policy)
        if key is None:
            return policy
        return _POLICIES.setdefault(key, policy)

    def spec(
        self,
        model: Model,
        tools: ToolRegistry,
        settings: ModelSettings | None = None,
        output: OutputSpec | None = None,
        sources: tuple[ToolSource, ...] = (),
    ) -> TurnSpec:
        """A turn's spec: ``tools`` as registered now, and the agent's settings with
        the turn's ``settings`` over them (``ValueError`` if a ``tool_choice``
        names a tool it does not have)."""
        return build_spec(
            model,
            tools,
            self.system,
            self.max_steps,
            self.tool_execution,
            self.max_parallel_tools,
            self.tool_grace_period,
            check_run_settings(
                merge_settings(self.settings, settings), offered(tools, output, sources)
            ),
            output,
            sources,
        )


POLICY_OPTIONS = tuple(field.name for field in attrs.fields(SessionPolicy))
"""The ``Agent()`` options that make its ``SessionPolicy``, by name."""

_POLICIES: weakref.WeakValueDictionary[tuple[Any, ...], SessionPolicy] = (
    weakref.WeakValueDictionary()
)
"""Policies of live agents that can be shared, by their plain values; an entry goes
with the last agent holding its policy."""


def _sharing_key(policy: SessionPolicy) -> tuple[Any, ...] | None:
    """A key by which agents may share ``policy``: only one made of plain values
    (no hook, the default retries and token count), each with its type, so that
    ``1``, ``1.0`` and ``True`` never stand for one another. None: not shared."""
    hooks = (
        policy.transform_context,
        policy.before_tool_call,
        policy.after_tool_call,
        policy.should_stop_turn,
        policy.compact,
    )
    if any(hook is not None for hook in hooks) or policy.retry is not DEFAULT_RETRY:
        return None
    if policy.prices is not None:  # a dict: not a key
        return None
    if policy.count_tokens is not estimate_tokens:
        return None
    values = attrs.astuple(policy, recurse=False)
    # settings may hold dicts: their canonical JSON stands for them
    return tuple(
        (type(value), msgspec.json.encode(value, order="sorted"))
        if type(value) is ModelSettings
        else (type(value), value)
        for value in values
    )


def drain(queue: list[Message], reserved: dict[str, None]) -> tuple[Message, ...]:
    """Take everything queued; the ids are no longer reserved (once in the
    transcript, it refuses them). A tuple: an empty one costs nothing."""
    taken = tuple(queue)
    queue.clear()
    for message in taken:
        reserved.pop(message.id, None)
    return taken


def owes_reply(conversation: Conversation) -> bool:
    """Whether the model owes an answer: the transcript ends on a user message or a
    tool result, or on an assistant message whose calls are not all answered."""
    messages = conversation.messages
    if not messages:
        return False
    return type(messages[-1]) is not AssistantMessage or bool(conversation.linker.open_calls)


def interrupted_results(conversation: Conversation) -> tuple[ToolResultMessage, ...]:
    """Results for the calls a cut turn left open: interrupted, as errors."""
    return tuple(
        tool_result(call, INTERRUPTED_RESULT_TEXT, True) for call in conversation.unanswered_calls()
    )


def new_id(prefix: str) -> str:
    """A fresh id such as ``user-0123456789ab``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@final
class Inbox:
    """Input queued for the session: steering (delivered before the next request
    of the current turn), follow-ups (when it would end), and the ids of those
    and of pending prompts, reserved so nothing can clash with them later."""

    # lists, not deques: only appended, drained whole and cleared; an empty deque is
    # 600 B. ``reserved`` is a dict: an empty set is 216 B.
    __slots__ = ("follow_ups", "reserved", "steering")

    def __init__(self) -> None:
        self.steering: list[Message] = []
        self.follow_ups: list[Message] = []
        self.reserved: dict[str, None] = {}

    def admit(self, message: str | UserMessage, conversation: Conversation) -> UserMessage:
        """Check an input message (``TypeError``/``TranscriptError`` at once) and
        reserve its id, so nothing can clash with it later."""
        if type(message) is str:
            user = UserMessage(new_id("user"), message)
        elif type(message) is UserMessage:
            user = message
        else:
            raise TypeError(f"expected a str or UserMessage, got {type(message).__name__}")
        conversation.check_new(user)
        if user.id.startswith(RESERVED_PREFIXES):
            raise TranscriptError(
                "RESERVED_ID",
                f"message id {user.id!r} uses a prefix the loop keeps for its own messages "
                f"({', '.join(RESERVED_PREFIXES)})",
            )
        if user.id in self.reserved:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {user.id!r} is queued")
        self.reserved[user.id] = None
        return user

    def release(self, prompt: Message | None) -> None:
        """Let ``prompt``'s id go: its turn did not start, so it took nothing."""
        if prompt is not None:
            self.reserved.pop(prompt.id, None)

    def take_input(self, stop_reason: str) -> tuple[Message, ...]:
        """What continues the turn after a step: steering first, then (when the model
        stopped) the follow-ups."""
        if self.steering:
            return drain(self.steering, self.reserved)
        if stop_reason != "tool_call":
            return drain(self.follow_ups, self.reserved)
        return ()

    def requeue(self, taken: Sequence[Message]) -> None:
        """Put a turn's input back, first in line (its turn could not take it)."""
        self.follow_ups[:0] = taken
        self.reserved.update(dict.fromkeys(message.id for message in taken))

    def take_for_turn(self, prompt: Message | None) -> tuple[Message, ...]:
        """A new turn's input: its prompt with the queued steering, or else the
        follow-ups."""
        taken = drain(self.steering, self.reserved)
        if prompt is not None:
            self.reserved.pop(prompt.id, None)
            taken = (prompt, *taken)
        if not taken:
            taken = drain(self.follow_ups, self.reserved)
        return taken


@final
class SessionHooks(StepHooks):
    """The engine hooks of one session turn: they read the session's frozen policy
    and its inbox, and keep the turn's repeated-failure count."""

    __slots__ = (
        "_approvals",
        "_emit",
        "_failing_count",
        "_failing_key",
        "_failing_tool",
        "_inbox",
        "_journal",
        "_policy",
        "_rng",
        "_turn",
    )

    def __init__(
        self,
        policy: SessionPolicy,
        inbox: Inbox,
        emit: Emitter,
        turn: int,
        approvals: Approvals | None = None,
        journal: Journal | None = None,
    ) -> None:
        self._policy = policy
        self._approvals = Approvals() if approvals is None else approvals
        self._journal = journal
        self._inbox = inbox
        self._emit = emit
        self._turn = turn
        self._rng: random.Random | None = None  # made on the first retry: 2.5 KB each
        self._failing_key: bytes | None = None
        self._failing_count = 0
        self._failing_tool = ""

    # -- inbox (read here, not through a call more: twice a step)
    def has_input(self, stop_reason: str) -> bool:
        inbox = self._inbox
        return bool(inbox.steering) or (stop_reason != "tool_call" and bool(inbox.follow_ups))

    def take_input(self, stop_reason: str) -> tuple[Message, ...]:
        return self._inbox.take_input(stop_reason)

    # -- requests
    async def _view(
        self, request: ModelRequest, conversation: Conversation, *, rebuilt: bool
    ) -> ModelRequest:
        """The request as sent: ``transform_context`` applied to the transcript.

        ``rebuilt``: the transcript changed (compaction) since ``request`` was made.
        """
        transform = self._policy.transform_context
        if transform is None:
            if not rebuilt:
                return request
            return msgspec.structs.replace(request, messages=conversation.snapshot())
        returned = await call_hook("transform_context", transform, conversation.snapshot())
        try:
            messages = tuple(returned)
            validate(messages)
        except (TypeError, TranscriptError) as exc:
            raise StepError(
                HOOK_ERROR, f"hook transform_context returned an invalid transcript: {exc}", exc
            ) from None
        return msgspec.structs.replace(request, messages=messages)

    async def prepare_request(
        self, request: ModelRequest, conversation: Conversation
    ) -> ModelRequest:
        policy = self._policy
        request = await self._view(request, conversation, rebuilt=False)
        window = policy.context_window
        if window is None:
            return request
        budget = window - policy.reserve_output_tokens
        needed = self._count(request)
        if needed <= budget:
            return request
        if policy.compact is None:
            raise StepError(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens; the window "
                f"leaves {budget} after reserving {policy.reserve_output_tokens} for output",
            )
        compacted = await call_hook("compact", policy.compact, conversation.snapshot())
        try:
            if type(compacted) not in (list, tuple):
                raise TypeError(f"a list or tuple of messages, not {type(compacted).__name__}")
            conversation.replace(compacted)
        except (TypeError, TranscriptError) as exc:
            raise StepError(
                HOOK_ERROR, f"hook compact returned an unusable transcript: {exc}", exc
            ) from None
        messages = conversation.snapshot()
        await self._emit.announce(
            [
                lambda sequence: ContextCompacted(
                    sequence=sequence, request_id=request.id, messages=messages
                )
            ]
        )
        request = await self._view(request, conversation, rebuilt=True)
        needed = self._count(request)
        if needed > budget:
            raise StepError(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens after compaction; the window "
                f"leaves {budget}",
            )
        return request

    def _count(self, request: ModelRequest) -> int:
        try:
            count = self._policy.count_tokens(request)
        except Exception as exc:
            raise StepError(HOOK_ERROR, f"count_tokens raised {describe(exc)}", exc) from exc
        if type(count) is not int:
            raise StepError(HOOK_ERROR, f"count_tokens must return an int, got {count!r:.100}")
        return count

    def retry_delay(self, error: Exception, attempt: int) -> float | None:
        if self._rng is None:  # seeded per turn with (seed, turn): deterministic, stateless
            seed = self._policy.seed
            self._rng = random.Random(None if seed is None else f"{seed}:{self._turn}")
        return self._policy.retry.delay(error, attempt, self._rng)

    # -- tools
    # -- approvals
    def may_hold(self, calls: Sequence[ToolCall], spec: TurnSpec) -> bool:
        if self._policy.approval is not None:
            return True
        tools = spec.tools
        return any(
            (tool := tools.get(c.name)) is not None and tool.requires_approval is not False
            for c in calls
        )

    async def hold_calls(self, calls: Sequence[ToolCall], spec: TurnSpec) -> frozenset[str]:
        approvals, policy = self._approvals, self._policy.approval
        return await hold_for_approval(approvals, calls, spec, policy, self._journal, self._emit)

    def still_open(self) -> frozenset[str]:
        return frozenset(self._approvals.held)

    def awaiting_approval(self) -> TurnAwaitingApproval | None:
        if not self._approvals.held:
            return None
        undecided = self._approvals.undecided()
        return TurnAwaitingApproval(call_ids=tuple(c.id for c in undecided)) if undecided else None

    async def before_tool_call(self, call: ToolCall) -> str | None:
        rejected = rejection(call.id, self._approvals)
        if rejected is not None:  # a person's no, given between turns
            return rejected
        hook = self._policy.before_tool_call
        if hook is None:
            return None
        decision = await call_hook("before_tool_call", hook, call)
        if decision is None:
            return None
        if type(decision) is not ToolBlocked:
            raise StepError(
                HOOK_ERROR,
                f"hook before_tool_call must return None or block(reason), got {decision!r:.200}",
            )
        return decision.reason

    async def after_tool_call(self, call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        hook = self._policy.after_tool_call
        if hook is not None:
            result = await call_hook("after_tool_call", hook, call, result)
            if type(result) is not ToolResultMessage:
                return result  # the engine names the hook in its error
        self._track_failures(call, result)
        return result

    def finalize_result(self, result: ToolResultMessage) -> ToolResultMessage:
        limit = self._policy.max_tool_result_chars
        content = result.content
        if limit is None or (type(content) is str and len(content) <= limit):
            return result
        cut = truncate_content(content, limit)
        return result if cut is content else msgspec.structs.replace(result, content=cut)

    def _track_failures(self, call: ToolCall, result: ToolResultMessage) -> None:
        if call.name == OUTPUT_TOOL_NAME:  # its refusals count against output_retries
            return
        if not result.is_error:
            self._failing_key, self._failing_count = None, 0
            return
        key = call.name.encode() + b"\0" + msgspec.json.encode(call.arguments, order="sorted")
        if key == self._failing_key:
            self._failing_count += 1
        else:
            self._failing_key, self._failing_count, self._failing_tool = key, 1, call.name

    # -- policies
    async def after_step(self, state: TurnState) -> TurnEnd | None:
        policy = self._policy
        stop = policy.should_stop_turn
        if stop is not None and await call_hook("should_stop_turn", stop, state):
            return TurnBlocked(detail="should_stop_turn returned True")
        if policy.max_turn_tokens is not None and state.total_tokens >= policy.max_turn_tokens:
            return TurnTokenBudget(used=state.total_tokens, limit=policy.max_turn_tokens)
        limit = policy.max_repeated_failures
        if limit is not None and self._failing_count >= limit:
            return TurnRepeatedFailure(tool_name=self._failing_tool, count=self._failing_count)
        return None
