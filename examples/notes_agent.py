"""A small typed trio-agent app: a note-taking agent with a recorded session.

Run it offline (a scripted model plays the assistant):

    python examples/notes_agent.py --ledger-dir /tmp/notes

or against a real OpenAI-compatible server (the key from OPENAI_API_KEY):

    python examples/notes_agent.py --openai gpt-4o-mini "Note that the demo works"

It passes ``mypy --strict`` (CI checks it): the tools keep their signatures,
and ``event.type == "..."`` narrows an event to its class without isinstance.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio

from trio_agent import (
    Agent,
    JsonlStore,
    Model,
    OpenAIChatModel,
    SessionEvent,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    TurnResult,
    tool,
)
from trio_agent.testing import ScriptedModel, scripted_response

NOTES: list[str] = []


@tool
async def add_note(text: str) -> str:
    """Keep a short note for later."""
    if not text.strip():
        raise ToolError("a note needs some text")  # the model sees this and can retry
    NOTES.append(text.strip())
    await trio.lowlevel.checkpoint()
    return f"noted ({len(NOTES)} in all)"


@tool
def count_words(ctx: ToolContext) -> dict[str, int]:
    """Count the words in all notes (a plain def: it runs in a worker thread)."""
    ctx.report(f"counting {len(NOTES)} note(s)")  # a tool.updated event, thread-safe
    return {"notes": len(NOTES), "words": sum(len(note.split()) for note in NOTES)}


def scripted_model(note: str) -> ScriptedModel:
    """What a model would do with the task, as a script: no network, no key."""
    return ScriptedModel(
        [
            scripted_response("r1", [ToolCall("call-1", "add_note", {"text": note})]),
            scripted_response("r2", [ToolCall("call-2", "count_words", {})]),
            scripted_response("r3", f"Noted: {note!r}. Your notes are counted.", text_chunks=3),
        ]
    )


def show(event: SessionEvent) -> None:
    """Print one event; each branch sees the event's own class."""
    if event.type == "model.chunk":
        if event.chunk.type == "text_delta":
            print(event.chunk.text, end="", flush=True)
    elif event.type == "tool.started":
        print(f"-> {event.call.name}({event.call.arguments})")
    elif event.type == "tool.updated":
        print(f"   ... {event.message}")
    elif event.type == "tool.finished":
        print(f"   [{'error' if event.result.is_error else 'ok'}] {event.result.content}")
    elif event.type == "turn.finished":
        print(f"\n[turn {event.turn}: {event.result.end.reason}, {event.result.steps} steps]")


async def run(model: Model, task: str, ledger_dir: Path) -> TurnResult:
    """One recorded turn; its events printed as they come."""
    agent = Agent(
        model=model,
        tools=ToolRegistry([add_note, count_words]),
        system="Keep the user's notes.",
        store=JsonlStore(ledger_dir),
    )
    async with agent:
        turn = agent.turn(task)
        async with turn:
            async for event in turn:
                show(event)
        result = turn.result
        assert result is not None  # set once the turn has finished
        return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A note-taking agent, typed.")
    parser.add_argument("task", nargs="?", default="Note that the demo works")
    parser.add_argument("--openai", metavar="MODEL", help="use this OpenAI model (needs a key)")
    parser.add_argument("--ledger-dir", type=Path, help="where the session is recorded")
    args = parser.parse_args(argv)
    model: Model = OpenAIChatModel(args.openai) if args.openai else scripted_model(args.task)
    ledger_dir: Path = args.ledger_dir or Path(tempfile.mkdtemp(prefix="notes-"))
    result = trio.run(run, model, args.task, ledger_dir)
    print(f"notes: {NOTES}; ledger in {ledger_dir}")
    return 0 if result.end.reason == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
