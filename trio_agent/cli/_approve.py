"""``approve`` and ``reject``: decide a call a recorded session holds for approval,
from any shell (DESIGN 11.5).

The session is opened as its one writer (``Agent.resume``: a session has one
writer at a time), the decision recorded (``approval/decided``, durably, with
who and when) and the session closed again. Nothing runs here, and no model is
asked (none is made: no API key is needed). The decision is sealed with this
user's key (``_trust.decision_seal``): a resume runs an approved call only
under such a seal, and asks again otherwise. The next turn (``trio-agent resume``,
or a ``run --approve wait`` waiting on the session) runs or answers the call.
A decision that cannot be made (no such call, not held, already decided, the
session being written by a running process) is said so, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from contextlib import AbstractAsyncContextManager
from typing import final

import trio

from ..events import ApprovalDecision
from ..ledger._derive import DerivedSession, derive
from ..ledger._records import SessionLockedError
from ..messages._ir import AssistantMessage, ToolCall
from ..model import ModelRequest, ModelStream
from ..session._agent import Agent
from ..workspace._workspace import Workspace
from ._commands import ledger_location, read_ledger
from ._config import recorded
from ._drive import EXIT_OK, EXIT_USAGE, arguments_problem, call_text, os_user
from ._output import json_line, one_line, visible
from ._trust import decision_seal, no_seal_reason

__all__ = ["approve", "reject"]


class Refused(Exception):
    """A decision that cannot be made; the text says why (exit 2)."""


@final
class _NoModel:
    """The model of a session opened only to record a decision: never asked."""

    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[ModelStream]:
        raise RuntimeError("trio-agent approve/reject never asks the model")


def approve(args: argparse.Namespace) -> int:
    return _decide(args, approved=True)


def reject(args: argparse.Namespace) -> int:
    return _decide(args, approved=False)


def _decide(args: argparse.Namespace, *, approved: bool) -> int:
    try:
        lines = _record(args, approved)
    except Refused as exc:
        print(f"trio-agent {args.command}: {visible(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write("".join(visible(line) + "\n" for line in lines))
    return EXIT_OK


def _record(args: argparse.Namespace, approved: bool) -> list[str]:
    """Record the decision; the lines that say what was done and what comes next."""
    store, session_id, file = ledger_location(args.ledger)
    derived = derive(read_ledger(args.ledger).records)
    call = _held_call(derived, args.call_id)  # checked again, under the lock, below
    arguments = getattr(args, "arguments", None)
    if arguments is not None:
        tools = None
        record = recorded(derived.metadata)
        if record is not None and record.agent is None:  # the workspace's tools: their schemas
            tools = Workspace(file.parent, sandbox="none").tools()  # for its schemas
        problem = arguments_problem(tools, call.name, arguments)
        if problem is not None:
            raise Refused(f"--arguments: {problem}")
    by = os_user() if args.by is None else args.by
    reason = "" if approved else args.reason
    # sealed with this user's key (read or made before trio runs): a resume runs the
    # call only under such a seal (_trust.decision_is_mine)
    seal = decision_seal(
        session_id,
        call,
        approved,
        arguments=arguments,
        by=by,
        reason=reason,
    )
    if seal is None and approved:  # a resume would not run the call on it: say so now
        raise Refused(
            f"the approval cannot be sealed ({no_seal_reason()}), and a resume runs an "
            "approved call only under your seal; fix the key, or decide at the terminal "
            f"with `trio-agent resume {shlex.quote(str(args.ledger))} --approve ask`"
        )

    async def body() -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            agent = await Agent.resume(store, session_id, model=_NoModel())
        except SessionLockedError as exc:
            raise Refused(
                f"session {session_id} is being written by a running process ({exc}); a "
                "`trio-agent run` asking at its terminal decides there: answer it, or stop "
                "it; one run with --approve wait lets the session go while it waits"
            ) from None
        try:
            if approved:
                await agent.approve(call.id, arguments=arguments, by=by, seal=seal)
            else:
                await agent.reject(call.id, reason, by=by, seal=seal)
        except (ValueError, TypeError) as exc:  # decided meanwhile; a name that is no text
            raise Refused(str(exc)) from None
        finally:
            await agent.aclose()
        closed = tuple(
            f"closed call {r.tool_call_id} ({r.tool_name}) as {code}"
            for r, code in agent.closed_on_resume
        )
        return agent.resume_warnings, closed

    warnings, closed = trio.run(body)
    lines = [f"warning: {warning}" for warning in warnings] + list(closed)
    said = "approved" if approved else "rejected"
    if by:
        said += f" by {one_line(by, 40)}"
    if reason:
        said += f" ({one_line(reason, 80)})"
    lines.append(f"{said}: {one_line(call.id, 80)} {call_text(call)}")
    if arguments is not None:
        lines.append(f"  to run with {one_line(json_line(arguments), 160)}")
    after = derive(read_ledger(args.ledger).records)
    left = [c for c in after.pending_approvals if c.id not in after.decisions]
    if left:
        lines.append(f"still waiting for approval: {len(left)} call(s)")
        lines += [f"  {one_line(c.id, 80)} {call_text(c)}" for c in left]
    else:
        path = shlex.quote(os.path.abspath(args.ledger))
        lines.append(
            "every held call is decided: a `trio-agent run --approve wait` waiting on this "
            f"session goes on by itself; otherwise `trio-agent resume {path}` does"
        )
    return lines


def _held_call(derived: DerivedSession, call_id: str) -> ToolCall:
    """The call ``call_id`` names, held and undecided; else ``Refused``, saying why."""
    held = {call.id: call for call in derived.pending_approvals}
    call = held.get(call_id)
    session = derived.session_id
    if call is None:
        waiting = [c.id for c in derived.pending_approvals if c.id not in derived.decisions]
        now = f"waiting now: {', '.join(waiting)}" if waiting else "no call waits for approval"
        if _called(derived, call_id):
            why = f"call {call_id!r} of session {session} is not waiting for approval"
            raise Refused(f"{why} (it was answered, or never needed a yes); {now}")
        raise Refused(f"session {session} has no call {call_id!r}; {now}")
    decision = derived.decisions.get(call_id)
    if decision is not None:
        raise Refused(f"call {call_id!r} was already {_decided(decision)}")
    return call


def _called(derived: DerivedSession, call_id: str) -> bool:
    """Whether the session's transcript holds a call ``call_id``."""
    return any(
        isinstance(block, ToolCall) and block.id == call_id
        for message in derived.messages
        if type(message) is AssistantMessage
        for block in message.content
    )


def _decided(decision: ApprovalDecision) -> str:
    text = "approved" if decision.approved else "rejected"
    if decision.by:
        text += f" by {one_line(decision.by, 40)}"
    if decision.at:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(decision.at))
        text += f" at {when}"
    return text
