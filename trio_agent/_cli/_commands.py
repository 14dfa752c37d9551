"""``demo``, ``run`` and ``resume``: each builds what it needs before trio starts (the
configuration, the model, the workspace: every usage error comes first), then
drives one turn through the one ``Printer``."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from ..ledger import DerivedSession, SessionExistsError, TurnEndRecord, derive
from ..messages import AssistantMessage
from ..session import Agent
from ..stores import JsonlStore, LoadedSession, parse_jsonl
from ..workspace import Workspace
from ._config import RunConfig, Settings, given, recorded, resolve
from ._output import Output, Printer, describe_end
from ._output_schema import read_output_schema
from ._parser import DEFAULT_SYSTEM, UsageError

if TYPE_CHECKING:
    from ..providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

    ProviderModel = OpenAIChatModel | OpenAIResponsesModel | AnthropicModel

__all__ = [
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
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130
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


async def drive_turn(
    agent: Agent, message: str | None, printer: Printer, *, pace: float = 0.0
) -> int:
    """Run one turn, printing its events; Ctrl-C cancels it cleanly (exit 130), and
    the ledger (if any) is closed however the turn ends. A typed turn's accepted
    output (``output_type``) is printed last (``Printer.output``)."""
    interrupted = False
    run = agent.turn(message)
    # The receiver stays open until the ledger is closed: a second Ctrl-C during
    # the cleanup is just another signal, never a KeyboardInterrupt mid-cleanup.
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def on_sigint() -> None:
                nonlocal interrupted
                async for _ in signals:
                    if not interrupted:
                        interrupted = True
                        run.cancel()

            nursery.start_soon(on_sigint)
            if printer.live:
                nursery.start_soon(printer.spin)
            try:
                async with run:
                    async for event in run:
                        printer(event)
                        if pace and event.type == "model.chunk":
                            await trio.sleep(pace)  # the scripted demo, paced as a stream
            finally:
                printer.close()
                await agent.aclose()
            nursery.cancel_scope.cancel()
    result = run.result
    assert result is not None  # the turn ran to its end (or raised above)
    if interrupted:
        closed = "; the ledger is closed and valid" if agent.session_id is not None else ""
        printer.note(f"interrupted: the turn was cancelled{closed}")
        return EXIT_INTERRUPTED
    if result.output is not None:
        printer.output(result.output)
    return EXIT_OK if result.end.reason == "completed" else EXIT_FAILED


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
    from .._demo import QUESTION, demo_agent

    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)
    pace = 0.0 if args.json else DEMO_PACE
    return _trio_run(output, lambda: drive_turn(demo_agent(), QUESTION, printer, pace=pace))


def run(args: argparse.Namespace) -> int:
    config = resolve(given(args), system=DEFAULT_SYSTEM)
    answer = None if args.output_schema is None else read_output_schema(args.output_schema)
    location = None if args.ledger is None else ledger_location(args.ledger)
    model = config.model_object()
    config = msgspec.structs.replace(config, base_url=model.base_url)  # as it is used
    workspace = Workspace(config.workspace)
    tools = workspace.tools()
    settings = config.settings(tools.names())  # a usage error now, before anything runs
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)

    async def body() -> int:
        agent = Agent(
            model=model,
            tools=tools,
            settings=settings,
            system=config.system,
            max_steps=config.max_steps,
            retry=config.retry(),
            metadata=config.metadata(),
            store=None if location is None else location[0],
            session_id=None if location is None else location[1],
            output_type=None if answer is None else answer.output_type,
            output_validator=None if answer is None else answer.validate,
        )
        try:
            return await drive_turn(agent, args.task, printer)
        except* SessionExistsError:  # the store found the file taken, at the turn's start
            raise UsageError(
                f"{args.ledger} already holds a session: use "
                f"`trio-agent resume {shlex.quote(args.ledger)}` to go on with it"
            ) from None

    return _trio_run(output, body, model)


def _left_by_an_interruption(loaded: LoadedSession, derived: DerivedSession) -> str | None:
    """None if an interruption left the session owing a reply that ``resume`` with
    no message continues: calls the resume answers (left open), or a transcript
    ending on a user message or a tool result in a turn that did not end (a
    crash) or ended ``interrupted`` or ``cancelled`` (Ctrl-C). Else why not: a
    turn that ended another way (``max_steps``, ``failed``, ...) is not taken up
    again without a new message. Decided from the records alone, so a refusal
    writes nothing (no resume took the ledger over)."""
    if derived.closing_results():
        return None
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
    store, session_id, _ = ledger_location(args.ledger)
    loaded = read_ledger(args.ledger)
    derived = derive(loaded.records)
    if args.task is None and (why := _left_by_an_interruption(loaded, derived)) is not None:
        raise UsageError(  # before any other check: no key or flag would change this
            f"nothing to continue in {session_id} ({why}); pass --message TEXT to start a new turn"
        )
    flags = given(args)
    config = resolve(flags, recorded(derived.metadata), system=derived.system)
    model = config.model_object(key_named_by=_key_named_by(flags, config))
    workspace = Workspace(config.workspace)
    tools = workspace.tools()
    settings = config.settings(tools.names())  # a usage error now, before anything runs
    output = Output(sys.stdout, sys.stderr)
    printer = Printer(output, as_json=args.json)

    async def body() -> int:
        agent = await Agent.resume(
            store,
            session_id,
            model=model,
            tools=tools,
            settings=settings,
            system=config.system,
            max_steps=config.max_steps,
            retry=config.retry(),
        )
        for warning in agent.resume_warnings:
            printer.note(f"warning: {warning}")
        for result, code in agent.closed_on_resume:
            printer.note(f"closed call {result.tool_call_id} ({result.tool_name}) as {code}")
        if args.task is None and not agent.awaiting_reply:
            # another writer went on with the session since it was read above
            await agent.aclose()
            raise UsageError(
                f"nothing to continue in {session_id} (another process went on with it); "
                "pass --message TEXT to start a new turn"
            )
        return await drive_turn(agent, args.task, printer)

    return _trio_run(output, body, model)


def _key_named_by(flags: Settings, config: RunConfig) -> str:
    """Where the key variable's name came from, for the error when it is unset."""
    if flags.api_key_env is not None or config.api_key_env is None:
        return "--api-key-env"
    return "the ledger's recorded configuration"
