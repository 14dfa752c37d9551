"""Crash test with real processes: SIGKILL a durable session at random moments
(seeded), then load, check and resume every ledger (issue 4)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio
from crash_child import SESSION, STEPS, StepwiseModel, make_tools

from trio_agent import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    JsonlStore,
    TurnCompleted,
    repair_transcript,
    validate_transcript,
)
from trio_agent.ledger import derive

CHILD = Path(__file__).parent / "crash_child.py"
TRIALS = 100
SEED = 20261129


def dispatched(directory: Path) -> list[str]:
    path = directory / "dispatched.log"
    return path.read_text().split() if path.exists() else []


def call_id(key: str) -> str:
    return f"call-{key[:-1]}-{key[-1]}"


async def crash_once(directory: Path, delay: float) -> bool:
    """Run the child until it is ready, let it work ``delay`` seconds, SIGKILL it.
    Returns whether it had already finished."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(directory)], stdout=subprocess.PIPE
    )
    output = b""
    assert process.stdout is not None
    try:
        while b"ready\n" not in output:
            chunk = await process.stdout.receive_some()
            assert chunk, f"child exited early: {output!r}"
            output += chunk
        await trio.sleep(delay)
    finally:
        process.kill()
        await process.wait()
    rest = await process.stdout.receive_some()
    while rest:
        output += rest
        rest = await process.stdout.receive_some()
    await process.stdout.aclose()
    return b"finished" in output


async def test_sigkill_at_random_moments_then_load_check_and_resume(tmp_path):
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    for trial in range(TRIALS):
        directory = tmp_path / f"trial-{trial}"
        directory.mkdir()
        finished = await crash_once(directory, rng.uniform(0.0, 0.08))
        seen["finished" if finished else "killed"] += 1
        store = JsonlStore(directory)

        # load succeeds (a torn last line is ignored), seq contiguous
        loaded = await store.load(SESSION)
        seen["torn"] += bool(loaded.warnings)
        assert [r.seq for r in loaded.records] == list(range(len(loaded.records)))
        derived = derive(loaded.records)
        validate_transcript(repair_transcript(derived.messages))
        # every dispatch was recorded as tool/call before it happened
        before = dispatched(directory)
        assert {call_id(k) for k in before} <= derived.dispatched, trial

        # resume: open calls are closed explicitly, nothing is run again
        agent = await Agent.resume(
            store,
            SESSION,
            model=StepwiseModel(),
            tools=make_tools(directory),
            max_steps=STEPS + 1,
        )
        for _, code in agent.closed_on_resume:
            seen[code] += 1
        assert dispatched(directory) == before
        validate_transcript(agent.messages)

        # resuming to completion works, and no call id is ever dispatched twice
        result = await agent.prompt("continue")
        await agent.aclose()
        assert result.end == TurnCompleted(), (trial, result.end)
        assert result.final_text == "all done"
        after = dispatched(directory)
        assert len(after) == len(set(after)), f"trial {trial}: a call ran twice: {after}"
        again = await store.load(SESSION)
        assert again.warnings == ()
        assert list(derive(again.records).messages) == list(result.messages)
    # the seeded kills landed at many different moments
    assert seen["killed"] >= 60, seen
    assert seen[TOOL_OUTCOME_UNKNOWN] >= 10, seen
