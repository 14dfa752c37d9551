"""The ``trio-agent`` command line: ``demo``, ``run``, ``show`` and ``resume``."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import trio

from .messages import TextBlock, UserMessage
from .model import TextDelta

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _print(line: str = "", end: str = "\n") -> None:
    print(line, end=end, flush=True)


def _model(args: argparse.Namespace) -> Any:
    from .providers import AnthropicModel, OpenAIChatModel

    options: dict[str, Any] = {}
    if args.base_url:
        options["base_url"] = args.base_url
    if args.provider == "openai":
        return OpenAIChatModel(args.model, **options)
    return AnthropicModel(args.model, max_tokens=args.max_tokens, **options)


def _ledger_location(path: str) -> tuple[Any, str]:
    from .stores import JsonlStore

    file = Path(path)
    if file.suffix != ".jsonl":
        raise ValueError(f"a ledger is a .jsonl file, got {path}")
    return JsonlStore(file.parent), file.stem


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Printer:
    """Prints a turn's events for a person (or as JSON lines with ``as_json``)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.in_text = False

    def __call__(self, event: Any) -> None:
        if self.as_json:
            _print(msgspec.json.encode(event).decode())
            return
        kind = event.type
        if kind == "model.chunk" and isinstance(event.chunk, TextDelta):
            _print(event.chunk.text, end="")
            self.in_text = True
            return
        if self.in_text:
            _print()
            self.in_text = False
        if kind == "tool.started":
            args = msgspec.json.encode(event.call.arguments).decode()
            _print(f"-> {event.call.name}({_one_line(args, 80)})")
        elif kind == "tool.updated":
            _print(f"   ... {_one_line(event.message, 80)}")
        elif kind == "tool.finished":
            mark = "error" if event.result.is_error else "ok"
            _print(f"   [{mark}] {_one_line(event.result.content)}")
        elif kind == "attempt.failed":
            wait = "giving up" if event.retry_in is None else f"retrying in {event.retry_in:.1f} s"
            _print(f"   (attempt {event.attempt} failed: {_one_line(event.error, 80)}; {wait})")
        elif kind == "turn.finished":
            end = event.result.end
            detail = getattr(end, "detail", "") or getattr(end, "code", "")
            usage = event.result.usage
            _print(
                f"[turn {event.turn} {end.reason}{': ' + detail if detail else ''}; "
                f"{event.result.steps} step(s), {usage.input_tokens} in / "
                f"{usage.output_tokens} out tokens]"
            )


async def _drive_turn(agent: Any, message: str | None, as_json: bool) -> int:
    """Run one turn, printing its events; Ctrl-C cancels it cleanly (exit 130)."""
    printer = _Printer(as_json)
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
            try:
                async with run:
                    async for event in run:
                        printer(event)
            finally:  # the ledger is flushed and closed however the turn ends
                await agent.aclose()
            nursery.cancel_scope.cancel()
    result = run.result
    if interrupted:
        if not as_json:
            _print(
                f"interrupted: the turn was cancelled; the ledger is closed ({result.end.reason})"
            )
        return EXIT_INTERRUPTED
    return EXIT_OK if result.end.reason == "completed" else EXIT_FAILED


async def _run(args: argparse.Namespace) -> int:
    from .session import Agent
    from .workspace import Workspace

    workspace = Workspace(args.workspace)
    options: dict[str, Any] = {
        "model": _model(args),
        "tools": workspace.tools(),
        "max_steps": args.max_steps,
        "system": args.system,
    }
    if args.ledger:
        store, session_id = _ledger_location(args.ledger)
        if not store.directory.is_dir():
            store.directory.mkdir(parents=True)
        options.update(store=store, session_id=session_id)
    agent = Agent(**options)
    return await _drive_turn(agent, args.task, args.json)


async def _resume(args: argparse.Namespace) -> int:
    from .session import Agent
    from .workspace import Workspace

    store, session_id = _ledger_location(args.ledger)
    agent = await Agent.resume(
        store,
        session_id,
        model=_model(args),
        tools=Workspace(args.workspace).tools(),
        max_steps=args.max_steps,
    )
    for warning in agent.resume_warnings:
        _print(f"warning: {warning}")
    for result, code in agent.closed_on_resume:
        _print(f"closed call {result.tool_call_id} ({result.tool_name}) as {code}")
    return await _drive_turn(agent, args.task, args.json)


def _show(args: argparse.Namespace) -> int:
    from .ledger import LedgerError, derive
    from .stores import JsonlStore, parse_jsonl
    from .stores._lock import holder_of

    store, session_id = _ledger_location(args.ledger)
    path = store.path(session_id)
    try:
        loaded = parse_jsonl(session_id, path.read_bytes())
    except OSError as exc:
        raise LedgerError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
    if args.json:
        for record in loaded.records:
            _print(msgspec.json.encode(record).decode())
        return EXIT_OK
    derived = derive(loaded.records)
    for warning in loaded.warnings:
        _print(f"warning: {warning}")
    _print(f"session {derived.session_id}: {derived.turns} turn(s), {derived.requests} request(s)")
    for record in loaded.records:
        _print_record(record)
    assert isinstance(store, JsonlStore)
    _print(f"\n{_state_of(derived, holder_of(store.path(session_id)))}")
    usage, failed = derived.usage, derived.failed_usage
    line = f"usage: {usage.input_tokens} input / {usage.output_tokens} output tokens"
    if failed.input_tokens or failed.output_tokens:
        line += (
            f" (and {failed.input_tokens} input / {failed.output_tokens} output in "
            "responses that were refused)"
        )
    _print(line)
    return EXIT_OK


def _state_of(derived: Any, holder: str | None) -> str:
    """How the last writer left the session: closed, being written, or died."""
    if holder is not None:
        return f"open: {holder} is writing it"
    if derived.closed:
        return "closed cleanly by its last writer"
    where = "in a turn" if derived.open_turn is not None else "between turns"
    return f"not closed: its last writer crashed or was killed ({where})"


def _print_record(record: Any) -> None:
    kind = record.kind
    if kind == "turn/start":
        _print(f"\n== turn {record.turn}")
    elif kind == "message":
        message = record.message
        if isinstance(message, UserMessage):
            _print(f"user: {_one_line(message.content)}")
        else:
            for block in message.content:
                if isinstance(block, TextBlock):
                    if block.text:
                        _print(f"assistant: {_one_line(block.text)}")
                else:
                    args_text = msgspec.json.encode(block.arguments).decode()
                    _print(f"  call {block.name}({_one_line(args_text, 80)}) [{block.id}]")
    elif kind == "tool/result":
        mark = "error" if record.result.is_error else "ok"
        code = f" {record.code}" if record.code else ""
        _print(f"  result [{mark}{code}] {_one_line(record.result.content)}")
    elif kind == "tool/cancelled":
        _print(f"  call {record.call_id} was cancelled while it ran")
    elif kind == "tool/failed":
        _print(f"  call {record.call_id} failed fatally: {_one_line(record.error, 80)}")
    elif kind == "step/start":
        _print(f"- {record.request_id}")
    elif kind == "attempt/failed":
        _print(f"  attempt {record.attempt} failed: {_one_line(record.error, 80)}")
    elif kind == "turn/end":
        end = record.end
        detail = getattr(end, "detail", "") or getattr(end, "code", "")
        _print(f"== turn {record.turn} ended: {end.reason}{': ' + detail if detail else ''}")
    elif kind == "session/closed":
        _print("(session closed)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trio-agent", description="LLM agent loops on trio.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an offline multi-step demo on a scripted model")
    demo.add_argument("--json", action="store_true", help="print events as JSON lines")

    def agent_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--provider", choices=["openai", "anthropic"], required=True)
        sub.add_argument("--model", required=True)
        sub.add_argument("--workspace", required=True, help="the directory the tools work in")
        sub.add_argument("--base-url", help="an OpenAI-compatible or Anthropic server URL")
        sub.add_argument("--max-steps", type=int, default=32)
        sub.add_argument("--max-tokens", type=int, default=4096, help="Anthropic max_tokens")
        sub.add_argument("--json", action="store_true", help="print events as JSON lines")

    run = commands.add_parser("run", help="run an agent on a task, with workspace tools")
    agent_options(run)
    run.add_argument("--ledger", help="record the session to this .jsonl file")
    run.add_argument("--system", default="You are a careful assistant working in a workspace.")
    run.add_argument("task")
    resume = commands.add_parser("resume", help="resume a recorded session")
    resume.add_argument("ledger")
    agent_options(resume)
    resume.add_argument(
        "--message", dest="task", help="a new message (default: go on with what is queued)"
    )
    show = commands.add_parser("show", help="show a recorded session")
    show.add_argument("ledger")
    show.add_argument("--json", action="store_true", help="print the records as JSON lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``trio-agent`` and ``python -m trio_agent``."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ._demo import run_demo

            return trio.run(lambda: run_demo(_print, as_json=args.json))
        if args.command == "show":
            return _show(args)
        runner: Callable[[argparse.Namespace], Any] = _run if args.command == "run" else _resume
        return trio.run(runner, args)
    except KeyboardInterrupt:
        _print("interrupted", end="\n")
        return EXIT_INTERRUPTED
    except (ValueError, OSError) as exc:
        print(f"trio-agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        from .ledger import LedgerError
        from .model import ModelError

        if isinstance(exc, LedgerError | ModelError):
            print(f"trio-agent: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        raise


if __name__ == "__main__":
    sys.exit(main())
