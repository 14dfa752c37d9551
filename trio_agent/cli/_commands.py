"""``demo``, ``run`` and ``resume``: each builds what it needs before trio starts (the
configuration, the model, the workspace, the ``--approve`` mode, or the agent
``--agent`` names: every usage error comes first), then drives the session
through the one ``Printer`` (``Driver``: the turn, and the turns that follow a
pause for approval).

``resume`` goes on with a session as it was run: with the configuration ``run``
recorded (flags given override it), or with ``--agent`` again when ``run
--agent`` made it (said so when it is left out). A ledger ``run`` did not write
(an application's) records no configuration: it needs ``--agent``, or
``--provider`` and ``--model``; the workspace tools come only with an explicit
``--workspace`` (the application's tools are not the workspace's)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import msgspec
import trio

from .._settings import ModelSettings
from ..ledger._derive import DerivedSession, derive
from ..ledger._records import SessionExistsError, TurnEndRecord
from ..messages._ir import AssistantMessage
from ..session._agent import Agent
from ..stores._base import LoadedSession, parse_jsonl
from ..stores._jsonl import JsonlStore
from ..tools._tool import ToolRegistry, ToolSource
from ..workspace._errors import WorkspaceError
from ..workspace._workspace import Workspace
from ._app import AppAgent, load_agent, refuse_beside, tools_of
from ._config import METADATA_KEY, RunConfig, Settings, dropped_by, given, recorded, resolve
from ._drive import (
    EXIT_AWAITING,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Driver,
    approval_mode,
    approval_policy,
)
from ._errors import UsageError
from ._mcp import all_tools, open_servers
from ._output import Output, Printer, describe_end
from ._output_schema import read_output_schema
from ._parser import DEFAULT_SYSTEM
from ._trust import check_trusted

if TYPE_CHECKING:
    from ..providers.anthropic import AnthropicModel
    from ..providers.openai import OpenAIChatModel
    from ..providers.responses import OpenAIResponsesModel

    ProviderModel = OpenAIChatModel | OpenAIResponsesModel | AnthropicModel

__all__ = [
    "EXIT_AWAITING",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "demo",
    "drive_turn",
    "ledger_location",
    "read_ledger",
    "resume",
    "run",
    "sandbox_line",
    "workspace_for",
]

DEMO_PACE: Final = 0.03  # seconds between the scripted model's chunks, as a stream


def ledger_location(ledger: str) -> tuple[JsonlStore, str, Path]:
    """The store, session id and file of a ``.jsonl`` ledger path."""
    file = Path(ledger)
    if file.suffix != ".jsonl" or not file.stem:
        raise UsageError(f"a ledger is a .jsonl file, got {ledger!r}")
    return JsonlStore(file.parent), file.stem, file


def read_ledger(ledger: str) -> LoadedSession:
    """The records of an existing ledger, read before trio runs."""
    _, session_id, file = ledger_location(ledger)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no ledger at {ledger}") from None
    except IsADirectoryError:
        raise UsageError(f"{ledger} is a directory, not a ledger") from None
    return parse_jsonl(session_id, data)


def workspace_for(root: str | Path, args: argparse.Namespace) -> Workspace:
    """The workspace at ``root`` confined as ``--sandbox`` and ``--allow-network`` say
    (a sandbox that cannot be had is a usage error)."""
    try:
        return Workspace(root, sandbox=args.sandbox or "auto", network=args.allow_network)
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None


def sandbox_line(workspace: Workspace) -> str:
    """What the run tool's commands run in, said at the start of a command."""
    return f"sandbox: {workspace.sandbox} - {workspace.confinement.describe()}"


def shared(
    model: Any,
    tools: ToolRegistry,
    sources: Sequence[ToolSource],
    settings: ModelSettings | None,
    config: RunConfig,
) -> dict[str, Any]:
    """The ``Agent()`` / ``Agent.resume`` options every command gives the same way."""
    return {
        "model": model,
        "tools": tools,
        "tool_sources": sources,
        "settings": settings,
        "system": config.system,
        "max_steps": config.max_steps,
        "retry": config.retry(),
    }


async def drive_turn(
    agent: Agent, message: str | None, printer: Printer, *, pace: float = 0.0
) -> int:
    """Run one turn, printing its events (``Driver``, no approvals asked for); Ctrl-C
    cancels it cleanly (exit 130), and the ledger (if any) is closed however the
    turn ends. A typed turn's accepted output is printed last (``Printer.output``)."""
    return await Driver(agent, printer, pace=pace).run(message)


def _trio_run(
    output: Output, body: Callable[[], Awaitable[int]], model: ProviderModel | None = None
) -> int:
    """Run ``body`` in trio beside the output's writer task; what the writer could
    not write (the body failed) is written once trio is done. ``model``'s
    connections are closed at the end."""

    async def main() -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(output.run)
            try:
                return await body()
            finally:
                output.close()
                if model is not None:
                    await model.aclose()

    try:
        return trio.run(main)
    finally:
        output.flush_here()


def demo(args: argparse.Namespace) -> int:
    from ._demo import QUESTION, demo_agent

    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)
    pace = 0.0 if args.json else DEMO_PACE
    return _trio_run(output, lambda: drive_turn(demo_agent(), QUESTION, printer, pace=pace))


def _needs_ledger(mode: str, ledger: str | None) -> None:
    if mode in ("wait", "defer") and ledger is None:
        raise UsageError(
            f"--approve {mode} needs --ledger FILE.jsonl: the calls are decided on the "
            "recorded session, from another shell"
        )


def _poll(ledger: str) -> Callable[[], DerivedSession]:
    """Read and derive ``ledger`` (read only: no writer, no lock), for ``wait``."""
    return lambda: derive(read_ledger(ledger).records)


def _driver(
    agent: Agent,
    printer: Printer,
    mode: str,
    ledger: str | None,
    reopen: Callable[[], Awaitable[Agent]],
    tools: ToolRegistry | None,
    max_steps: int,
) -> Driver:
    """The session's driver, as ``run`` and ``resume`` both make it (``wait`` polls
    the ledger, when there is one)."""
    return Driver(
        agent,
        printer,
        mode=mode,
        ledger=ledger,
        reopen=reopen,
        poll=None if ledger is None else _poll(ledger),
        records=None if ledger is None else lambda: read_ledger(ledger).records,
        tools=tools,
        max_steps=max_steps,
    )


def _taken(ledger: str) -> UsageError:
    return UsageError(
        f"{ledger} already holds a session: use "
        f"`trio-agent resume {shlex.quote(ledger)}` to go on with it"
    )


def run(args: argparse.Namespace) -> int:
    if args.agent is not None:
        return _run_app(args)
    why = "run needs a model and a workspace, or your own agent (--agent MODULE:NAME)"
    config = resolve(given(args), system=DEFAULT_SYSTEM, why=why)
    mode = approval_mode(args.approve)
    _needs_ledger(mode, args.ledger)
    policy = approval_policy(mode)
    answer = None if args.output_schema is None else read_output_schema(args.output_schema)
    location = None if args.ledger is None else ledger_location(args.ledger)
    model = config.model_object()
    config = msgspec.structs.replace(config, base_url=model.base_url)  # as it is used
    assert config.workspace is not None  # needed by resolve
    workspace = workspace_for(config.workspace, args)
    workspace_tools = workspace.tools()
    early = _early_settings(config, workspace_tools)  # a usage error now, before anything runs
    metadata = config.metadata()  # sealed: the key is read (or made) before trio runs
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)
    printer.note(sandbox_line(workspace))

    typed = {
        "output_type": None if answer is None else answer.output_type,
        "output_validator": None if answer is None else answer.validate,
    }

    async def drive(
        tools: ToolRegistry, sources: Sequence[ToolSource], settings: ModelSettings | None
    ) -> int:
        options = {**shared(model, tools, sources, settings, config), **typed, "approval": policy}
        agent = Agent(
            **options,
            metadata=metadata,
            store=None if location is None else location[0],
            session_id=None if location is None else location[1],
        )

        async def reopen() -> Agent:
            assert location is not None  # wait needs a ledger
            return await Agent.resume(location[0], location[1], **options)

        driver = _driver(agent, printer, mode, args.ledger, reopen, tools, config.max_steps)
        try:
            return await driver.run(args.task)
        except* SessionExistsError:  # the store found the file taken, at the turn's start
            raise _taken(args.ledger) from None

    return _trio_run(output, lambda: _with_servers(config, workspace_tools, early, drive), model)


def _run_app(args: argparse.Namespace) -> int:
    """``run --agent``: one session of the application's agent, recorded in
    ``--ledger`` when given (its configuration: the ``MODULE:NAME``)."""
    refuse_beside(args)
    mode = approval_mode(args.approve)
    _needs_ledger(mode, args.ledger)
    app = load_agent(args.agent)
    if app.factory is not None and args.ledger is None:
        raise UsageError(app.needs_a_store("run"))
    location = None if args.ledger is None else ledger_location(args.ledger)
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)

    async def drive() -> int:
        agent = await app.start(*((None, None) if location is None else location[:2]))

        async def reopen() -> Agent:
            assert location is not None  # wait needs a ledger
            return await app.resume(location[0], location[1])

        max_steps = agent.options.max_steps
        driver = _driver(agent, printer, mode, args.ledger, reopen, tools_of(agent), max_steps)
        try:
            return await driver.run(args.task)
        except* SessionExistsError:
            raise _taken(args.ledger) from None

    return _trio_run(output, drive)


def _left_by_an_interruption(loaded: LoadedSession, derived: DerivedSession) -> str | None:
    """None if an interruption left the session owing a reply that ``resume`` with
    no message continues: calls the resume answers (left open) or runs again
    (owed a rerun), or a transcript ending on a user message or a tool result in
    a turn that did not end (a crash) or ended ``interrupted`` or ``cancelled``
    (Ctrl-C). Else why not: a
    turn that ended another way (``max_steps``, ``failed``, ...) is not taken up
    again without a new message. Decided from the records alone, so a refusal
    writes nothing (no resume took the ledger over)."""
    if derived.closing_results():
        return None
    if derived.pending_approvals:
        return None  # calls wait for approval: resume decides them (--approve) and goes on
    if derived.reruns:
        return None  # calls a crash cut off in their run: resume runs them again, goes on
    messages = derived.messages
    if not messages or type(messages[-1]) is AssistantMessage:
        return "the model owes no reply"
    if derived.open_turn is not None:
        return None
    end = next((r.end for r in reversed(loaded.records) if type(r) is TurnEndRecord), None)
    if end is None:  # messages outside a turn: not a ledger trio-agent writes
        return "no turn was left owing a reply"
    if end.reason in ("interrupted", "cancelled"):
        return None
    return f"turn {derived.turns} ended {describe_end(end)}, not by an interruption"


def resume(args: argparse.Namespace) -> int:
    if args.agent is not None:
        refuse_beside(args)
    store, session_id, _ = ledger_location(args.ledger)
    loaded = read_ledger(args.ledger)
    derived = derive(loaded.records)
    if args.task is None and (why := _left_by_an_interruption(loaded, derived)) is not None:
        raise UsageError(  # before any other check: no key or flag would change this
            f"nothing to continue in {session_id} ({why}); pass --message TEXT to start a new turn"
        )
    mode = approval_mode(args.approve)
    if args.agent is not None:
        return _resume_with(args, load_agent(args.agent), store, session_id, mode)
    flags = given(args)
    config = _resumed_config(flags, derived.metadata, derived.system, session_id)
    if config.workspace is None and (args.sandbox is not None or args.allow_network):
        raise UsageError(
            "--sandbox and --allow-network confine the workspace's run tool: they need "
            "--workspace DIR"
        )
    model = config.model_object(key_named_by=_key_named_by(flags, config))
    workspace = None if config.workspace is None else workspace_for(config.workspace, args)
    workspace_tools = ToolRegistry() if workspace is None else workspace.tools()
    early = _early_settings(config, workspace_tools)  # a usage error now, before anything runs
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)
    if workspace is None:
        printer.note("no workspace: no workspace tools (pass --workspace DIR for them)")
    else:
        printer.note(sandbox_line(workspace))
    policy = approval_policy(mode)

    async def drive(
        tools: ToolRegistry, sources: Sequence[ToolSource], settings: ModelSettings | None
    ) -> int:
        options = {**shared(model, tools, sources, settings, config), "approval": policy}
        on = _Resumed(args, session_id, mode, printer)
        return await on.drive(
            lambda: Agent.resume(store, session_id, **options), tools, config.max_steps
        )

    return _trio_run(output, lambda: _with_servers(config, workspace_tools, early, drive), model)


def _resumed_config(
    flags: Settings, metadata: Mapping[str, Any] | None, system: str, session_id: str
) -> RunConfig:
    """The configuration a resume without ``--agent`` runs with: the record (its
    commands, key and directory only if this user sealed it: ``check_trusted``),
    the flags over it. A session ``run --agent`` made needs ``--agent`` again; one
    ``run`` did not record needs ``--provider`` and ``--model`` (the workspace
    tools only with ``--workspace``)."""
    record = recorded(metadata)
    if record is not None and record.agent is not None:
        raise UsageError(
            f"this session was run with --agent {record.agent}; pass --agent {record.agent}"
        )
    if record is not None and metadata is not None:
        check_trusted(metadata[METADATA_KEY], record, flags, dropped_by(flags, record))
    if record is None and (flags.provider is None or flags.model is None):
        raise UsageError(
            f"session {session_id} was not started by `trio-agent run` (its ledger records "
            "no run configuration: an application, or an older version, wrote it): pass "
            "--agent MODULE:NAME to go on with the application's agent, or --provider and "
            "--model to go on with a model alone, with no tools (and --workspace DIR for "
            "the workspace tools)"
        )
    return resolve(flags, record, system=system, workspace=record is not None)


def _resume_with(
    args: argparse.Namespace, app: AppAgent, store: JsonlStore, session_id: str, mode: str
) -> int:
    """``resume --agent``: the recorded session, with the application's agent."""
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)

    async def drive() -> int:
        on = _Resumed(args, session_id, mode, printer)
        return await on.drive(lambda: app.resume(store, session_id), None, None)

    return _trio_run(output, drive)


@attrs.frozen
class _Resumed:
    """What a resume drives, however its agent is made."""

    args: argparse.Namespace
    session_id: str
    mode: str
    printer: Printer

    async def drive(
        self,
        reopen: Callable[[], Awaitable[Agent]],
        tools: ToolRegistry | None,
        max_steps: int | None,
    ) -> int:
        """Take the session over (``reopen``), say what its resume found, and drive
        it from ``--message`` (or the reply it owes); ``tools`` check edited
        arguments (None: the agent's own), ``max_steps`` bounds the command's
        requests (None: the agent's)."""
        printer, args = self.printer, self.args
        agent = await reopen()
        for warning in agent.resume_warnings:
            printer.note(f"warning: {warning}")
        for result, code in agent.closed_on_resume:
            printer.note(f"closed call {result.tool_call_id} ({result.tool_name}) as {code}")
        waiting = agent.pending_approvals or agent.decided_approvals
        if args.task is None and not agent.awaiting_reply and not waiting:
            # another writer went on with the session since it was read above
            await agent.aclose()
            raise UsageError(
                f"nothing to continue in {self.session_id} (another process went on with "
                "it); pass --message TEXT to start a new turn"
            )
        if tools is None:
            tools = tools_of(agent)
        steps = agent.options.max_steps if max_steps is None else max_steps
        driver = _driver(agent, printer, self.mode, args.ledger, reopen, tools, steps)
        return await driver.run(args.task)


def _early_settings(config: RunConfig, tools: ToolRegistry) -> ModelSettings | None:
    """The model settings, checked before trio starts when the tools are known then
    (no MCP server: ``--tool-choice`` may name one of their tools otherwise)."""
    return None if config.mcp else config.settings(tools.names())


async def _with_servers(
    config: RunConfig,
    workspace_tools: ToolRegistry,
    early: ModelSettings | None,
    drive: Callable[[ToolRegistry, Sequence[ToolSource], ModelSettings | None], Awaitable[int]],
) -> int:
    """``drive`` the session with the workspace tools and the configured MCP servers
    as tool sources (the agent reads their current lists at each step), each entered
    for the command's lifetime (a server that cannot be used, or a tool name taken
    twice, is a usage error, before the session is opened)."""
    async with open_servers(config.mcp, config.mcp_env, cwd=config.workspace) as servers:
        if not servers:
            return await drive(workspace_tools, (), early)
        names = [tool.name for tool in all_tools(list(workspace_tools), servers)]
        return await drive(workspace_tools, servers, config.settings(names))


def _key_named_by(flags: Settings, config: RunConfig) -> str:
    """Where the key variable's name came from, for the error when it is unset."""
    if flags.api_key_env is not None or config.api_key_env is None:
        return "--api-key-env"
    return "the ledger's recorded configuration"
