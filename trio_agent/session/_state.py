"""``SessionState``: what an ``Agent`` and its turns share, held in one explicit
object instead of being read off each other.

The ``Agent`` is a thin shell over it (its public methods and properties); a
``TurnRun`` is handed the same state and claims it for the length of one turn
(``claim`` / ``begin_turn`` / ``end_turn``); ``Agent.resume`` builds one from a
ledger. Every field is the session's own: the frozen policy, the model and
tools, the transcript, the inbox, the approvals, the ledger (once made) and
the counters.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._settings import check_settings
from ..engine._approvals import Approvals
from ..engine._fallback import model_label
from ..engine._options import (
    check_agent_name,
    check_int,
    check_messages_and_model,
    check_metadata,
    check_scope_unused,
    check_store,
    check_tool_sources,
    model_of,
    registry_of,
)
from ..engine._transcript import Conversation
from ..ledger._errors import LedgerError
from ..messages._ir import Message, ToolResultMessage, UserMessage
from ..model import Model, ModelSettings
from ..output._spec import OutputSpec, OutputValidator, check_output_tool, output_spec
from ..tools._tool import ToolRegistry, ToolSource
from ._hooks import BUSY
from ._inbox import Inbox, interrupted_results, new_id
from ._limits import NOTHING_USED, Used, check_priced
from ._options import AgentOptions
from ._policy import POLICY_OPTIONS, SessionPolicy

if TYPE_CHECKING:
    from ..engine._hooks import TurnSpec
    from ..ledger._ledger import FsyncPolicy, Ledger, PendingLedger
    from ..stores._base import SessionStore

__all__ = ["SessionState"]


@final
@attrs.define(eq=False, kw_only=True)
class SessionState:
    """The session an ``Agent`` keeps and its turns work on (one turn at a time:
    ``active``). Built by ``SessionState.new`` from the options; cancellation
    never leaves it half changed (each change is made between two checkpoints)."""

    policy: SessionPolicy
    model: Model
    tools: ToolRegistry
    sources: tuple[ToolSource, ...]
    output: OutputSpec | None
    output_mode: Any
    output_retries: int
    output_validator: OutputValidator | None
    fsync: FsyncPolicy
    name: str | None
    conversation: Conversation
    metadata: dict[str, Any] | None
    session_id: str | None
    pending: PendingLedger | None
    inbox: Inbox = attrs.field(factory=Inbox)
    used: Used = NOTHING_USED
    """What the session's turns used (kept only with ``session_usage_limits``)."""
    approvals: Approvals = attrs.field(factory=Approvals)
    unvetted: frozenset[str] = frozenset()
    """Calls to run again (``approvals.reruns``) whose first run the ledger shows no
    approval for: the turn that runs them asks the approval rule first."""
    ledger: Ledger | None = None
    turns: int = 0
    next_sequence: int = 0
    active: object | None = None
    """The turn running now (a ``TurnRun``), if one is."""
    closed: str | None = None
    """Why turns are refused once ``aclose()`` closed the session (None: open)."""
    host: trio.Nursery | None = None
    """The agent's own nursery while it is entered (``async with agent``)."""
    deps_type: Any = None
    """``deps_type=`` as given: for type checkers only, kept so ``options()`` is whole."""
    memory_key: str | None = None
    """A session without a store: its own id, made when a call first needs it (what
    its calls' idempotency keys begin with)."""

    @classmethod
    def new(
        cls,
        options: AgentOptions,
        *,
        messages: Sequence[Message] = (),
        request_sequence_start: int = 1,
        sequence_start: int = 0,
        store: SessionStore | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        conversation: Conversation | None = None,
    ) -> SessionState:
        """The state of a new agent: every option checked (``TypeError`` /
        ``ValueError`` naming it), ``messages`` checked as a transcript
        (``TranscriptError``). With a ``store`` the session id is fixed now and
        the ledger is made on first use. ``conversation`` (a resume's, checked when
        its records were replayed) is taken as it is, in place of ``messages``."""
        model = model_of(options.model)  # a name ("openai:gpt-4o") made into its model
        check_messages_and_model(messages, model)
        name = check_agent_name(options.name)
        sources = check_tool_sources(options.tool_sources)
        mode, retries, validator = (
            options.output_mode,
            options.output_retries,
            options.output_validator,
        )
        output = output_spec(options.output_type, mode, retries, validator)
        tools = registry_of(options.tools)
        if output is not None and output.tool is not None:  # at once, not at the first turn
            check_output_tool(tools)
        policy = SessionPolicy.build(**{key: getattr(options, key) for key in POLICY_OPTIONS})
        check_priced(model, policy.prices, policy.usage_limits, policy.session_usage_limits)
        check_int("request_sequence_start", request_sequence_start, 1)
        check_int("sequence_start", sequence_start, 0)
        checked_metadata = check_metadata(metadata)
        if conversation is None:  # raises TranscriptError
            conversation = Conversation.from_messages(messages, request_sequence_start - 1)
        check_store(store, session_id, options.fsync)
        pending: PendingLedger | None = None
        if store is not None:  # the id is fixed now; the ledger is made on first use
            from ..ledger._ledger import PendingLedger  # with the first store
            from ..stores._base import check_session_id

            session_id = new_id("session") if session_id is None else check_session_id(session_id)
            pending = PendingLedger(store.create, session_id, options.fsync)
        return cls(
            policy=policy,
            model=model,
            tools=tools,
            sources=sources,
            output=output,
            output_mode=mode,
            output_retries=retries,
            output_validator=validator,
            fsync=options.fsync,
            name=name,
            conversation=conversation,
            metadata=checked_metadata,
            session_id=session_id,
            pending=pending,
            next_sequence=sequence_start,
            deps_type=options.deps_type,
        )

    def options(self) -> AgentOptions:
        """The options this state was built with (as checked), to build another
        agent alike. The settings are a copy: the policy's may be shared with
        other agents, and their dicts would reach those."""
        output, policy = self.output, self.policy
        return AgentOptions(
            model=self.model,
            tools=self.tools,
            output_type=None if output is None else output.type,
            output_mode=self.output_mode,
            output_retries=self.output_retries,
            output_validator=self.output_validator,
            tool_sources=self.sources,
            fsync=self.fsync,
            name=self.name,
            deps_type=self.deps_type,
            **{key: getattr(policy, key) for key in POLICY_OPTIONS if key != "settings"},
            settings=check_settings(policy.settings),  # a private copy
        )

    def spec(
        self, settings: ModelSettings | None, output: OutputSpec | None, deps: Any = None
    ) -> TurnSpec:
        """A turn's spec: the tools as registered now, the turn's settings over the
        agent's, the turn's ``deps``."""
        policy = self.policy
        return policy.spec(self.model, self.tools, settings, output, self.sources, deps, self)

    def session_key(self) -> str:
        """What this session's calls' idempotency keys begin with: its id, or for a
        session without a store an id of its own, made when first needed."""
        key = self.session_id
        if key is None:
            key = self.memory_key
            if key is None:
                key = self.memory_key = f"memory-{uuid.uuid4().hex}"
        return key

    # -- the ledger, created on first use
    async def open(self, prompt: UserMessage | None = None) -> None:
        """Create the session's ledger if it is still to be made (``PendingLedger``):
        attached as soon as it is made (no checkpoint between), so it is either
        whole and in use or not made at all; after a failure it is still to be
        made (the next use tries again), and the turn's ``prompt`` is not kept."""
        while (pending := self.pending) is not None:
            conversation, created = self.conversation, False
            try:
                made = await pending.create(
                    system=self.policy.system,
                    first_request=conversation.requests + 1,
                    first_sequence=self.next_sequence,
                    metadata=self.metadata,
                    messages=conversation.messages,
                )
                created = True
            finally:
                if not created:
                    self.inbox.release(prompt)
            if made is not None:  # else another task's attempt ended: look again
                self.pending = None
                self.attach(made)

    def attach(self, ledger: Ledger) -> None:
        """Record the session in ``ledger`` from now on."""
        self.ledger = ledger
        self.conversation.journal = ledger

    def detach(self) -> Ledger | None:
        """Stop recording; the ledger (to close), if there was one."""
        ledger, self.ledger = self.ledger, None
        self.conversation.journal = None
        return ledger

    # -- turns
    def check_ready(self) -> None:
        """``RuntimeError`` when the next turn could not do what it must, before it
        records anything: a tool source that cannot list its tools (an MCP server
        never entered raises so), or an approved call it would run whose tool the
        agent was not given (a session resumed without it), or so would a call it
        would run again (``Approvals.reruns``)."""
        sources, approvals = self.sources, self.approvals
        if not sources and not approvals.decisions and not approvals.reruns:
            return
        offered = {tool.name for source in sources for tool in source.tools()}
        approved = [call for call, decision in approvals.decided() if decision.approved]
        reruns = list((approvals.reruns or {}).values())
        for what, calls in (("approved", approved), ("resumed", reruns)):
            for call in calls:
                if call.name not in self.tools and call.name not in offered:
                    raise RuntimeError(
                        f"{what} call {call.id!r} needs the tool {call.name!r}, which this "
                        "agent was not given: pass it in tools= (or a tool source that has it "
                        "in tool_sources=) when you resume the session"
                    )

    def check_open(self) -> None:
        """``RuntimeError`` once ``aclose()`` closed the session: nothing more is
        recorded in it (a decision taken now would count nowhere)."""
        if self.closed is not None:
            raise RuntimeError(self.closed)

    def check_free(self) -> None:
        """``RuntimeError`` if a turn runs or the session is closed."""
        if self.active is not None or self.closed is not None:
            raise RuntimeError(self.closed or BUSY)

    def claim(
        self, run: object, scope: trio.CancelScope | None, prompt: UserMessage | None
    ) -> None:
        """Make ``run`` the running turn: ``RuntimeError`` if one runs or the session is
        closed, ``ValueError`` if its ``scope`` was entered, with ``prompt``'s id
        let go."""
        try:
            self.check_free()
            check_scope_unused(scope)
        except (RuntimeError, ValueError):
            self.inbox.release(prompt)
            raise
        self.active = run

    @trio.lowlevel.enable_ki_protection  # taken from the inbox and owned by a turn, or neither
    def begin_turn(
        self, prompt: UserMessage | None, scope: trio.CancelScope | None, sequence: int
    ) -> tuple[int, tuple[Message, ...], tuple[ToolResultMessage, ...]]:
        """The claimed turn's number, its input (taken from the inbox), and results
        for calls a cut turn left open. Everything taken is appended before the
        turn's first await, so a cancellation cannot lose it. ``ValueError`` if
        ``scope`` was entered meanwhile (no checkpoint from here to the turn's own
        ``with scope``), before anything is recorded or taken."""
        turn = self.turns + 1
        try:
            check_scope_unused(scope)
            if self.ledger is not None:
                self.ledger.turn_started(turn, sequence, model_label(self.model))
        except (ValueError, LedgerError):  # nothing was taken; the prompt is not kept either
            self.inbox.release(prompt)
            raise
        self.turns = turn
        held, reruns = self.approvals.held, self.approvals.reruns  # answered by the turn
        repairs = tuple(
            r
            for r in interrupted_results(self.conversation)
            if r.tool_call_id not in held and r.tool_call_id not in (reruns or ())
        )
        return turn, self.inbox.take_for_turn(prompt), repairs

    def end_turn(self, run: object, sequence: int) -> None:
        """``run`` is over: the session is free, and its events continue at ``sequence``."""
        if self.active is run:
            self.active = None
            self.next_sequence = sequence
