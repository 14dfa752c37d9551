"""Approvals survive a SIGKILL at every point between ``approval/requested`` and
the call's result (issue 19): pending calls and decisions come back with
``Agent.resume`` in another process, a recorded decision is honoured, and a call
approved and dispatched before the crash is never dispatched again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio
from approval_child import SESSION, make_tools, model, open_store
from paths import SUPPORT

from trio_agent import TOOL_OUTCOME_UNKNOWN, Agent, ToolResultMessage, validate_transcript

CHILD = SUPPORT / "approval_child.py"
MARKS = {"hold": b"held", "decide": b"decided", "dispatch": b"dispatched", "answer": b"answered"}


async def run_until(directory: Path, kind: str, phase: str) -> None:
    """Run one phase in a child process, SIGKILL it once it says it got there."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(directory), kind, phase], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    output = b""
    try:
        with trio.fail_after(120):  # a hang guard: a process starts in seconds on a loaded machine
            while MARKS[phase] + b"\n" not in output:
                chunk = await process.stdout.receive_some()
                assert chunk, f"child exited early in {phase}: {output!r}"
                output += chunk
    finally:
        process.kill()
        await process.wait()
        await process.stdout.aclose()


def writes(directory: Path) -> list[str]:
    path = directory / "writes.log"
    return path.read_text().split() if path.exists() else []


async def resumed(directory: Path, kind: str) -> Agent:
    return await Agent.resume(
        open_store(directory, kind), SESSION, model=model(), tools=make_tools(directory)
    )


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_killed_after_the_request_the_held_call_is_pending_and_runs_once(tmp_path, kind):
    await run_until(tmp_path, kind, "hold")
    agent = await resumed(tmp_path, kind)
    assert [call.id for call in agent.pending_approvals] == ["c2"]
    assert agent.awaiting_reply and writes(tmp_path) == []
    result = await agent.prompt("meanwhile")  # undecided: no request, the input waits
    assert result.end.reason == "awaiting_approval" and result.steps == 0
    await agent.approve("c2")
    result = await agent.prompt()
    assert result.end.reason == "completed" and writes(tmp_path) == ["b"]
    validate_transcript(agent.messages)
    await agent.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_killed_after_the_decision_it_is_honoured(tmp_path, kind):
    await run_until(tmp_path, kind, "hold")
    await run_until(tmp_path, kind, "decide")
    agent = await resumed(tmp_path, kind)
    assert agent.pending_approvals == ()  # decided: it waits for no one (issue 35)
    assert [call.id for call in agent.decided_approvals] == ["c2"]
    with pytest.raises(ValueError, match="already decided"):
        await agent.reject("c2")
    result = await agent.prompt()
    assert result.end.reason == "completed" and writes(tmp_path) == ["b"]
    events_by = [m for m in agent.messages if type(m) is ToolResultMessage]
    assert [r.content for r in events_by] == ["content of a", "wrote b"]
    await agent.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_killed_while_the_approved_call_runs_it_is_never_dispatched_again(tmp_path, kind):
    await run_until(tmp_path, kind, "hold")
    await run_until(tmp_path, kind, "dispatch")
    assert writes(tmp_path) == ["b"]
    agent = await resumed(tmp_path, kind)
    assert agent.pending_approvals == ()
    [(closed, code)] = agent.closed_on_resume
    assert closed.tool_call_id == "c2" and code == TOOL_OUTCOME_UNKNOWN
    result = await agent.prompt("go on")
    assert result.end.reason == "completed"
    assert writes(tmp_path) == ["b"]  # at most once
    validate_transcript(agent.messages)
    await agent.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_killed_after_the_answer_nothing_is_pending_or_run_again(tmp_path, kind):
    await run_until(tmp_path, kind, "hold")
    await run_until(tmp_path, kind, "answer")
    agent = await resumed(tmp_path, kind)
    assert agent.pending_approvals == () and agent.closed_on_resume == ()
    with pytest.raises(ValueError):
        await agent.approve("c2")
    await agent.prompt("again")
    assert writes(tmp_path) == ["b"]
    await agent.aclose()
