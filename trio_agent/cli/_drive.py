"""Driving a session from the command line (``demo``, ``run``, ``resume``): a turn
at a time, its events printed through the one ``Printer``; when a turn ends
waiting for approval (DESIGN 11.5), the held calls are decided as
``--approve`` says and the session goes on with the next turn, until a turn
ends any other way.

The modes (``run``/``resume --approve``; never recorded in the ledger):

- ``ask``: each held call and its arguments are shown, and the answer read from
  stdin: ``y`` approves, ``n`` rejects (with an optional reason, for the
  model), ``e`` edits the arguments (one line of JSON, checked against the
  tool's parameters; asked again until it fits), then asks again. ``by`` is the
  OS user name. If stdin ends, the calls are left held, as ``defer``.
- ``auto``: no call is held (no policy); a call already held (a resumed session
  paused by another mode) is approved.
- ``deny``: each held call is rejected (``DENIED``); the model reads why.
- ``defer``: the command ends (``EXIT_AWAITING``) printing the held calls and
  the commands that decide them (``trio-agent approve``/``reject``) and go on
  (``trio-agent resume``).
- ``wait``: the same list, then the session is let go (closed: its lock goes,
  so another process can record a decision: a session has one writer at a
  time), the ledger polled (read only) until every held call is decided, and
  the session resumed (``Agent.resume``) and continued.

An approved call runs only under this user's seal on its decision
(``trio-agent approve`` and the asking here seal what they record:
``_trust.decision_seal``). A session taken up (resumed, or after ``wait``)
whose approval bears no such seal (a ledger handed over, or edited by hand;
an application's own ``agent.approve``) has that call asked about again, as
the mode says: ``ask`` asks (a ``n`` rejects it; stdin ending runs nothing),
``auto`` runs it, ``deny`` rejects it, and ``defer``/``wait`` stop with a usage
error (``approve`` cannot decide a call decided already). Such a rejection is
not recorded as a decision (the ledger keeps one per call): the call's error
result says it.

One command's turns together make at most ``--max-steps`` model requests: a
model that calls a denied tool again and again stops there, its calls left
held (``EXIT_AWAITING``), as ``defer`` leaves them. Ctrl-C cancels the turn
that runs, or stops the asking or the waiting; the held calls stay held, and
the ledger is closed and valid.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, TextIO, final

import trio

from ..events import ApprovalDecision, TurnAwaitingApproval, TurnResult
from ..ledger._derive import DerivedSession
from ..ledger._records import Record, SessionLockedError
from ..limits import ArgumentsError, check_arguments
from ..messages._ir import ToolCall
from ..session._agent import Agent
from ..tools._tool import ToolRegistry
from ._output import Printer, json_line, one_line
from ._output_schema import OutputSchema
from ._parser import GUARDED_TOOLS
from ._trust import decision_is_mine, decision_seal, unsealed_reruns

__all__ = [
    "DENIED",
    "EXIT_AWAITING",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Driver",
    "approval_mode",
    "approval_policy",
    "arguments_problem",
    "os_user",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_AWAITING: Final = 3
EXIT_INTERRUPTED: Final = 130

DENIED: Final = "denied by the command line"
UNSEALED: Final = "its approval in the ledger bears no seal of this user's"
POLL_SECONDS: Final = 0.1


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # a closed stream
        return False


def approval_mode(given: str | None) -> str:
    """``--approve`` as given, else ``ask`` when stdin is a terminal (a person can
    answer there), else ``deny`` (nobody can: nothing that writes or runs does)."""
    if given is not None:
        return given
    return "ask" if stdin_is_terminal() else "deny"


def approval_policy(mode: str) -> Callable[[ToolCall], Awaitable[bool]] | None:
    """The Agent's ``approval=``: the workspace tools that change things
    (``GUARDED_TOOLS``) need a yes, unless ``auto``."""
    if mode == "auto":
        return None
    guarded = frozenset(GUARDED_TOOLS)

    async def needs_approval(call: ToolCall) -> bool:
        return call.name in guarded

    return needs_approval


def os_user() -> str:
    """Who decides, by default: the OS user name ("" if it cannot be told)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return ""


def arguments_problem(tools: ToolRegistry | None, name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the arguments of a call to tool ``name`` (not a plain
    JSON object within the limits, or not fitting the tool's parameters), or None."""
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, not {type(value).__name__}"
    try:
        check_arguments(value)
    except ArgumentsError as exc:
        return str(exc)
    tool = None if tools is None else tools.get(name)
    if tool is not None:
        try:
            return OutputSchema(tool.parameters).problem(value)
        except RecursionError:
            return "the arguments are nested too deeply to be checked"
    return None


def call_text(call: ToolCall) -> str:
    """A call on one line: ``name({...})``, its arguments cut to fit."""
    return f"{one_line(call.name, 80)}({one_line(json_line(call.arguments), 120)})"


def _as_run(call: ToolCall, decision: ApprovalDecision) -> ToolCall:
    """``call`` as its approval runs it (with the approver's arguments, if set)."""
    if decision.arguments is None:
        return call
    return ToolCall(call.id, call.name, decision.arguments)


def decide_commands(ledger: str, calls: Sequence[ToolCall]) -> list[str]:
    """The commands that decide each of ``calls`` from another shell."""
    path = shlex.quote(os.path.abspath(ledger))
    lines = []
    for call in calls:
        lines.append(f"  trio-agent approve {path} {shlex.quote(call.id)}")
        lines.append(f"  trio-agent reject {path} {shlex.quote(call.id)} --reason TEXT")
    return lines


@final
class Driver:
    """Runs a session's turns for one command (``run``: the task and what follows
    from it), printing them, deciding held calls as ``mode`` says.

    ``ledger``: the session's file as given (None: not recorded); ``reopen``
    resumes the session after ``wait`` let it go, ``poll`` reads and derives its
    ledger (read only, in a worker thread), ``records`` reads its records (for the
    approvals of calls run again); ``tools`` check edited arguments.
    """

    def __init__(
        self,
        agent: Agent,
        printer: Printer,
        *,
        mode: str = "auto",
        ledger: str | None = None,
        reopen: Callable[[], Awaitable[Agent]] | None = None,
        poll: Callable[[], DerivedSession] | None = None,
        records: Callable[[], Sequence[Record]] | None = None,
        tools: ToolRegistry | None = None,
        max_steps: int | None = None,
        pace: float = 0.0,
        stdin: TextIO | None = None,
    ) -> None:
        if mode in ("wait", "defer") and ledger is None:
            raise ValueError(f"--approve {mode} needs a recorded session (--ledger)")
        self.agent = agent
        self.printer = printer
        self.mode = mode
        self.ledger = ledger
        self.reopen = reopen
        self.poll = poll
        self.records = records
        self.tools = tools
        self.max_steps = max_steps
        self.pace = pace
        self.stdin = sys.stdin if stdin is None else stdin
        self.user = os_user()
        self.interrupted = False
        self._cancel: Callable[[], None] | None = None
        self._waiting = 0  # calls left held when an interruption came between turns
        self._decided: set[str] = set()  # calls ``_ask`` decided, of those it asks about

    # -- the whole run
    async def run(self, message: str | None) -> int:
        """Run the session from ``message`` on; the exit code. The session is closed
        however it ends (the ledger valid, its lock let go)."""
        # The receiver stays open until the ledger is closed: a second Ctrl-C during
        # the cleanup is just another signal, never a KeyboardInterrupt mid-cleanup.
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._on_sigint, signals)
                if self.printer.live:
                    nursery.start_soon(self.printer.spin)
                try:
                    code = await self._session(message)
                finally:
                    self.printer.close()
                    await self.agent.aclose()
                nursery.cancel_scope.cancel()
        if self.interrupted:
            closed = "; the ledger is closed and valid" if self.agent.session_id else ""
            if self._waiting:
                what = f"{self._waiting} call(s) still wait for approval"
            else:
                what = "the turn was cancelled"
            self.printer.note(f"interrupted: {what}{closed}")
            return EXIT_INTERRUPTED
        return code

    async def _on_sigint(self, signals: Any) -> None:
        async for _ in signals:
            if not self.interrupted:
                self.interrupted = True
                if self._cancel is not None:
                    self._cancel()

    async def _session(self, message: str | None) -> int:
        steps = 0
        code = await self._settle_unsealed()
        if code is not None:
            return code
        while True:
            result = await self._turn(message)
            message = None
            if self.interrupted:
                return EXIT_INTERRUPTED
            steps += result.steps
            end = result.end
            if type(end) is not TurnAwaitingApproval:
                if result.output is not None:
                    self.printer.output(result.output)
                return EXIT_OK if end.reason == "completed" else EXIT_FAILED
            calls = self._held(end.call_ids)
            if self.max_steps is not None and steps >= self.max_steps:
                return self._leave(
                    calls,
                    f"stopped: this command's turns made {steps} model request(s) "
                    f"(--max-steps {self.max_steps})",
                )
            if self.mode == "defer":
                return self._leave(calls)
            if self.mode == "wait":
                if not await self._wait(calls):
                    self._waiting = len(calls)
                    return EXIT_INTERRUPTED
                code = await self._settle_unsealed()  # decided by another process
                if code is not None:
                    return code
                continue
            if self.mode == "ask":
                if not await self._ask(calls):
                    if self.interrupted:
                        self._waiting = len(self._held(end.call_ids, undecided=True))
                        return EXIT_INTERRUPTED
                    return self._leave(self._held(end.call_ids, undecided=True), "stdin ended")
                continue
            for call in calls:  # auto (a call held before) or deny
                if self.mode == "auto":
                    await self._decide(call, True)
                else:
                    await self._decide(call, False, reason=DENIED)

    async def _decide(
        self,
        call: ToolCall,
        approved: bool,
        *,
        reason: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """Record a decision on ``call``, sealed with this user's key (read in a
        worker thread) when the session is recorded."""
        agent, by = self.agent, self.user
        session_id = agent.session_id
        seal = None
        if session_id is not None:
            seal = await trio.to_thread.run_sync(
                functools.partial(
                    decision_seal,
                    session_id,
                    call,
                    approved,
                    arguments=arguments,
                    by=by,
                    reason=reason,
                )
            )
        if approved:
            await agent.approve(call.id, arguments=arguments, by=by, seal=seal)
        else:
            await agent.reject(call.id, reason, by=by, seal=seal)

    # -- approvals that bear no seal of this user's
    async def _unsealed(self) -> list[tuple[ToolCall, ApprovalDecision]]:
        """The held calls of the session as taken up whose decision approves them
        without this user's seal (checked in a worker thread: the key is read)."""
        agent = self.agent
        session_id = agent.session_id
        if session_id is None:
            return []
        decisions = agent.approval_decisions
        approved = [(c, decisions[c.id]) for c in agent.decided_approvals]
        approved = [(c, d) for c, d in approved if d.approved]
        if not approved:
            return []
        mine = await trio.to_thread.run_sync(
            lambda: [decision_is_mine(session_id, c, d) for c, d in approved]
        )
        return [pair for pair, ok in zip(approved, mine, strict=True) if not ok]

    async def _unsealed_reruns(self) -> list[ToolCall]:
        """The calls the session runs again (their process died mid-call) that were
        approved without this user's seal (the ledger's records read in a worker
        thread: the resumed agent keeps no decision for a call once dispatched)."""
        agent, read = self.agent, self.records
        reruns, session_id = agent.rerun_calls, agent.session_id
        if not reruns or session_id is None or read is None:
            return []
        return await trio.to_thread.run_sync(lambda: unsealed_reruns(session_id, read(), reruns))

    async def _settle_unsealed(self) -> int | None:
        """Ask again about each approval that bears no seal of this user's, as the
        mode says; None to go on, else the exit code (nothing was run). A call to
        run again under such an approval runs only with ``auto``: it cannot be
        rejected any more (it was dispatched), so any other mode stops."""
        note = self.printer.note
        reruns = await self._unsealed_reruns()
        if reruns:
            note(
                f"{len(reruns)} call(s) left to run again (their run was cut off) are "
                "approved in the ledger, but not by you (the decision bears no seal of "
                "yours: a ledger from someone else, or edited):"
            )
            for call in reruns:
                note(f"  {one_line(call.id, 80)} {call_text(call)}")
            if self.mode != "auto":
                return self._not_rerun()
            note("--approve auto: they run")
        unsealed = await self._unsealed()
        if not unsealed:
            return None
        note(
            f"{len(unsealed)} call(s) are approved in the ledger, but not by you (the "
            "decision bears no seal of yours: a ledger from someone else, or edited):"
        )
        for call, decision in unsealed:
            by = f" by {one_line(decision.by, 40)}" if decision.by else ""
            note(f"  {one_line(call.id, 80)} {call_text(_as_run(call, decision))}, approved{by}")
        if self.mode == "auto":
            note("--approve auto: they run")
            return None
        if self.mode == "deny":
            for call, _ in unsealed:
                self._overrule(call, f"{DENIED} ({UNSEALED})")
            return None
        if self.mode == "ask":
            for call, decision in unsealed:
                answer = await self._confirm(call, decision)
                if answer is None:
                    if self.interrupted:
                        return EXIT_INTERRUPTED
                    note("stdin ended: nothing was run")
                    return EXIT_AWAITING
                if type(answer) is str:
                    self._overrule(call, answer)
            return None
        return self._not_left(self.mode)

    def _not_rerun(self) -> int:
        """Calls to run again under another's approval run only with ``auto``."""
        path = shlex.quote(os.path.abspath(self.ledger or ""))
        self.printer.note(
            "nothing was run: a call run once cannot be rejected; to run them again, "
            f"after reading them: `trio-agent resume {path} --approve auto`"
        )
        return EXIT_USAGE

    def _not_left(self, mode: str) -> int:
        """``defer``/``wait`` cannot leave unsealed approvals to another shell."""
        path = shlex.quote(os.path.abspath(self.ledger or ""))
        self.printer.note(
            f"--approve {mode} leaves calls to `trio-agent approve`, which cannot decide "
            "a call decided already, so nothing was run: decide them here, at a terminal "
            f"(`trio-agent resume {path} --approve ask`), or reject them all "
            "(`--approve deny`), or run them all (`--approve auto`)"
        )
        return EXIT_USAGE

    async def _confirm(
        self, call: ToolCall, decision: ApprovalDecision
    ) -> Literal[True] | str | None:
        """Whether to run ``call`` as ``decision`` approved it: True; a rejection's
        reason; None at the end of stdin or on Ctrl-C."""
        ask = self.printer.ask
        ask(f"approved, but not by you: {one_line(call.name, 80)} [{one_line(call.id, 80)}]\n")
        shown = json.dumps(_as_run(call, decision).arguments, indent=2, ensure_ascii=False)
        ask("".join(f"  {line}\n" for line in shown.splitlines()))
        while True:
            answer = await self._read("run it? [y]es, [n]o: ")
            if answer is None:
                return None
            word = answer.strip().lower()
            if word in ("y", "yes"):
                return True
            if word in ("n", "no"):
                reason = await self._read("why (sent to the model; Enter: no reason): ")
                if reason is None:
                    return None
                return reason.strip() or UNSEALED
            ask("please answer y or n\n")

    def _overrule(self, call: ToolCall, reason: str) -> None:
        """Reject ``call`` in place of its unsealed approval, in this process (the
        ledger keeps one decision per call): the next turn answers it so."""
        self.agent.overrule(call.id, reason, by=self.user)

    async def _turn(self, message: str | None) -> TurnResult:
        run = self.agent.turn(message)
        self._cancel = run.cancel
        try:
            async with run:
                async for event in run:
                    self.printer(event)
                    if self.pace and event.type == "model.chunk":
                        await trio.sleep(self.pace)  # the scripted demo, paced as a stream
        finally:
            self._cancel = None
            self.printer.close()
        result = run.result
        assert result is not None  # the turn ran to its end (or raised above)
        return result

    def _held(self, call_ids: Sequence[str], *, undecided: bool = False) -> list[ToolCall]:
        """The held calls ``call_ids`` names, in their order (only those still
        undecided, if ``undecided``: ``_decided`` tells)."""
        agent = self.agent
        held = {c.id: c for c in (*agent.pending_approvals, *agent.decided_approvals)}
        calls = [held[i] for i in call_ids if i in held]
        return [c for c in calls if c.id not in self._decided] if undecided else calls

    # -- defer
    def _leave(self, calls: Sequence[ToolCall], why: str = "") -> int:
        """End the command with ``calls`` held: what they are and how to go on."""
        note = self.printer.note
        if why:
            note(why)
        if self.ledger is None:
            note(
                f"{len(calls)} call(s) were left waiting for approval; the session is not "
                "recorded (no --ledger), so nothing can go on with it"
            )
            return EXIT_AWAITING
        self._list(calls)
        note("decide each from a shell, then go on:")
        for line in decide_commands(self.ledger, calls):
            note(line)
        note(f"  trio-agent resume {shlex.quote(os.path.abspath(self.ledger))}")
        return EXIT_AWAITING

    def _list(self, calls: Sequence[ToolCall]) -> None:
        self.printer.note(f"{len(calls)} call(s) wait for approval:")
        for call in calls:
            self.printer.note(f"  {one_line(call.id, 80)} {call_text(call)}")

    # -- wait
    async def _wait(self, calls: Sequence[ToolCall]) -> bool:
        """Let the session go, wait until every call of ``calls`` is decided (or
        answered: another process went on with it), then take it up again
        (``self.agent``). False if interrupted meanwhile."""
        assert self.ledger is not None and self.reopen is not None and self.poll is not None
        self._list(calls)
        self.printer.note("decide each from another shell:")
        for line in decide_commands(self.ledger, calls):
            self.printer.note(line)
        self.printer.note(
            "waiting for the decisions (the session is let go meanwhile; Ctrl-C stops "
            "waiting, and the calls stay held)"
        )
        await self.agent.aclose()  # its lock goes: a decision can be recorded
        ids = [call.id for call in calls]
        with trio.CancelScope() as scope:
            self._cancel = scope.cancel
            if self.interrupted:
                scope.cancel()
            try:
                while True:
                    derived = await trio.to_thread.run_sync(self.poll)
                    held = {call.id for call in derived.pending_approvals}
                    if all(i not in held or i in derived.decisions for i in ids):
                        break
                    await trio.sleep(POLL_SECONDS)
                while True:
                    try:
                        agent = await self.reopen()
                        break
                    except SessionLockedError:  # the deciding process is closing it
                        await trio.sleep(POLL_SECONDS)
            finally:
                self._cancel = None
        if scope.cancelled_caught:
            return False
        self.agent = agent
        self.printer.note("decided: going on")
        for warning in agent.resume_warnings:
            self.printer.note(f"warning: {warning}")
        return True

    # -- ask
    async def _ask(self, calls: Sequence[ToolCall]) -> bool:
        """Ask about each call at the terminal and record the answers; False if stdin
        ended or Ctrl-C came before every call was decided."""
        self._decided = set()
        for call in calls:
            if not await self._ask_one(call):
                return False
            self._decided.add(call.id)
        return True

    async def _ask_one(self, call: ToolCall) -> bool:
        arguments = call.arguments
        edited = False
        self.printer.ask(f"approval needed: {one_line(call.name, 80)} [{one_line(call.id, 80)}]\n")
        while True:
            shown = json.dumps(arguments, indent=2, ensure_ascii=False)
            self.printer.ask("".join(f"  {line}\n" for line in shown.splitlines()))
            answer = await self._read("approve? [y]es, [n]o, [e]dit the arguments: ")
            if answer is None:
                return False
            word = answer.strip().lower()
            if word in ("y", "yes"):
                await self._decide(call, True, arguments=arguments if edited else None)
                return True
            if word in ("n", "no"):
                reason = await self._read("why (sent to the model; Enter: no reason): ")
                if reason is None:
                    return False
                await self._decide(call, False, reason=reason.strip())
                return True
            if word in ("e", "edit"):
                value = await self._edit(call)
                if value is None:
                    return False
                if value != arguments:
                    arguments, edited = value, value != call.arguments
                    self.printer.ask(f"{one_line(call.name, 80)} would run with:\n")
                continue
            self.printer.ask("please answer y, n or e\n")

    async def _edit(self, call: ToolCall) -> dict[str, Any] | None:
        """New arguments for ``call``, read as one line of JSON and checked (asked
        again until they fit); the model's own on an empty line; None at the end
        of stdin or on Ctrl-C."""
        while True:
            text = await self._read("the arguments as one line of JSON (Enter: the model's): ")
            if text is None:
                return None
            if not text.strip():
                return call.arguments
            try:
                value = json.loads(text)
            except (ValueError, RecursionError) as exc:  # nested past the reader's bound
                self.printer.ask(f"not JSON ({exc}); try again\n")
                continue
            problem = arguments_problem(self.tools, call.name, value)
            if problem is not None:
                self.printer.ask(f"{problem}; try again\n")
                continue
            return value  # type: ignore[no-any-return]  # a dict: checked above

    async def _read(self, prompt: str) -> str | None:
        """A line from stdin after ``prompt`` (without its newline), or None at the
        end of stdin or on Ctrl-C."""
        self.printer.ask(prompt)
        await self.printer.out.drained()  # the question is on the terminal first
        line = ""
        with trio.CancelScope() as scope:
            self._cancel = scope.cancel
            if self.interrupted:
                scope.cancel()
            try:
                line = await trio.to_thread.run_sync(self.stdin.readline, abandon_on_cancel=True)
            finally:
                self._cancel = None
        if scope.cancelled_caught:
            return None
        if not line:
            self.printer.ask("\n")
            return None
        return line.rstrip("\r\n")
