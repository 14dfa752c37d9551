"""Crash tests with real processes: SIGKILL a durable session at random moments
(seeded), then load, check and resume every ledger (issue 4), in every store; the
same while snapshots are written (issue 38); and two processes racing to resume
one session, the winner killed (issue 12)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import attrs
import pytest
import trio
from crash_child import EVERY_TURN, SESSION, STEPS, StepwiseModel, make_tools, open_store
from leases import lease_ended
from paths import SUPPORT
from waiting import WAIT, wait_until_async

from trio_agent import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    ToolResultMessage,
    TurnCompleted,
    repair_transcript,
    validate_transcript,
)
from trio_agent.ledger import SessionLockedError, derive

CHILD = SUPPORT / "crash_child.py"
RACER = SUPPORT / "race_child.py"
TRIALS = {"jsonl": 100, "sqlite": 40, "postgres": 20}
RACES = 8
SEED = 20261129


@pytest.fixture
def kind(request, monkeypatch):
    """The store a crash test runs on; for PostgreSQL, this process and the
    children reach the suite's cluster through ``TRIO_AGENT_TEST_PG_DSN``."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_cluster").dsn
        monkeypatch.setenv("TRIO_AGENT_TEST_PG_DSN", dsn)
    return request.param


async def resume_when_free(store, kind: str, **options):
    """``Agent.resume``; a killed PostgreSQL holder's lease is waited out (1 s
    in the children): the one store where a crash leaves the session held."""
    with trio.fail_after(WAIT):
        while True:
            try:
                return await Agent.resume(store, SESSION, **options)
            except SessionLockedError:
                if kind != "postgres":
                    raise
                await trio.sleep(0.1)


def dispatched(directory: Path) -> list[str]:
    path = directory / "dispatched.log"
    return path.read_text().split() if path.exists() else []


def call_id(key: str) -> str:
    return f"call-{key[:-1]}-{key[-1]}"


def check_effects(directory: Path, messages, reruns: list[str] | None, trial: int) -> None:
    """A once call ("a") never ran twice; an idempotent call ("b") ran again only
    when a resume owed it (``reruns``; None: not known), always with the same key,
    and every one dispatched ends with exactly one result: its own."""
    after = dispatched(directory)
    runs = Counter(after)
    twice = [key for key, count in runs.items() if count > 1]
    assert all(key.endswith("b") for key in twice), f"trial {trial}: a once call ran twice"
    if reruns is not None:  # one crash: a call ran at most once more, when a resume owed it
        # (one killed after its tool/call was stored but before it did anything ran once)
        assert {call_id(key) for key in twice} <= set(reruns), (trial, twice, reruns)
        assert all(runs[f"{c.split('-')[1]}b"] >= 1 for c in reruns), (trial, runs)
        assert max(runs.values(), default=0) <= 2, (trial, runs)
    for line in (directory / "keys.log").read_text().splitlines():
        key, idempotency_key = line.split()
        assert idempotency_key == f"{SESSION}/{call_id(key)}", (trial, line)
    answers = Counter(m.tool_call_id for m in messages if type(m) is ToolResultMessage)
    assert set(answers.values()) == {1}, (trial, answers)
    texts = {m.tool_call_id: m.content for m in messages if type(m) is ToolResultMessage}
    for key in runs:
        if key.endswith("b"):  # dispatched, maybe killed: its real result, once
            assert texts[call_id(key)] == key.upper(), (trial, key, texts[call_id(key)])


async def crash_once(
    directory: Path, delay: float, kind: str = "jsonl", *extra: str, until: bytes = b"ready\n"
) -> bool:
    """Run the child until it prints ``until`` (ready, or a line it stops on), let it
    work ``delay`` seconds, SIGKILL it. Returns whether it had already finished."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(directory), kind, *extra], stdout=subprocess.PIPE
    )
    output = b""
    assert process.stdout is not None
    try:
        while until not in output:
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


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"], indirect=True)
async def test_sigkill_at_random_moments_then_load_check_and_resume(tmp_path, kind):
    # SQLite: the session must exist from "ready" on (its Agent exists), and a
    # step/start must be stored before its request is opened.
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    trial = -1
    while (trial := trial + 1) < TRIALS[kind] or (
        not covered(seen, kind) and trial < TRIALS[kind] * 4
    ):  # a loaded machine slows the child, so fewer kills land mid-call: kill more
        directory = tmp_path / f"trial-{trial}"
        directory.mkdir()
        finished = await crash_once(directory, rng.uniform(0.0, 0.08), kind)
        seen["finished" if finished else "killed"] += 1
        store = open_store(directory, kind)

        # load succeeds (a torn last line is ignored), seq contiguous
        loaded = await store.load(SESSION)
        seen["torn"] += bool(loaded.warnings)
        assert [r.seq for r in loaded.records] == list(range(len(loaded.records)))
        derived = derive(loaded.records)
        validate_transcript(repair_transcript(derived.messages))
        # every dispatch was recorded as tool/call before it happened
        before = dispatched(directory)
        recorded = {r.call_id for r in loaded.records if r.kind == "tool/call"}
        assert {call_id(k) for k in before} <= recorded, trial

        # resume: open calls are closed explicitly, or left to run again (idempotent
        # ones whose outcome is unknown); nothing runs yet
        agent = await resume_when_free(
            store,
            kind,
            model=StepwiseModel(directory),
            tools=make_tools(directory),
            max_steps=STEPS + 1,
        )
        for result, code in agent.closed_on_resume:
            seen[code] += 1
            if code == TOOL_OUTCOME_UNKNOWN:  # only a once call is left unknown
                assert result.tool_call_id.endswith("-a"), (trial, result)
        reruns = [call.id for call in agent.rerun_calls]
        seen["rerun"] += len(reruns)
        assert all(call.endswith("-b") for call in reruns), (trial, reruns)
        assert dispatched(directory) == before
        validate_transcript(repair_transcript(agent.messages))

        # resuming to completion works, and no call id is ever dispatched twice
        result = await agent.prompt("continue")
        await agent.aclose()
        assert result.end == TurnCompleted(), (trial, result.end)
        # a request id is never sent twice: its step/start was stored before it was sent
        sent = (directory / "requests.log").read_text().split()
        assert len(sent) == len(set(sent)), f"trial {trial}: a request id was sent twice: {sent}"
        assert result.final_text == "all done"
        check_effects(directory, result.messages, reruns, trial)
        again = await store.load(SESSION)
        assert again.warnings == ()
        assert list(derive(again.records).messages) == list(result.messages)
    # the seeded kills landed at many different moments
    assert seen["killed"] >= TRIALS[kind] * 0.6, seen
    assert covered(seen, kind), seen
    print(f"{kind}: {dict(seen)}")  # the counts the note reports (pytest -s)


def covered(seen: Counter[str], kind: str) -> bool:
    """Whether kills landed mid-call: once calls answered as unknown, idempotent ones
    run again (together as many as before both kinds; each kind in the longest trial
    series)."""
    if seen[TOOL_OUTCOME_UNKNOWN] + seen["rerun"] < TRIALS[kind] // 10:
        return False
    return kind != "jsonl" or (seen[TOOL_OUTCOME_UNKNOWN] >= 3 and seen["rerun"] >= 3)


SNAPSHOT_TRIALS = {"jsonl": 60, "sqlite": 30}


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"], indirect=True)
async def test_sigkill_while_snapshots_are_written_then_resume_from_the_last_one(tmp_path, kind):
    """Issue 38: a session that writes a snapshot after each turn (slowed, so kills
    land while one is written: its replay, its line half written), killed at
    random moments. What its last snapshot and the records after it derive to is
    what the whole ledger derives to, the resume replays from there without a
    fallback, and resuming to the end keeps every effect's promise."""
    rng = random.Random(SEED + 2)
    seen: Counter[str] = Counter()
    for trial in range(SNAPSHOT_TRIALS[kind]):
        directory = tmp_path / f"trial-{trial}"
        directory.mkdir()
        if trial % 10 == 0:  # stopped in the middle of a snapshot, whatever the load
            stop = str(rng.randint(2, 3))  # one snapshot or two before it
            finished = await crash_once(directory, 0, kind, "snapshots", stop, until=b"snapshot\n")
        else:
            finished = await crash_once(directory, rng.uniform(0.0, 0.12), kind, "snapshots")
        seen["finished" if finished else "killed"] += 1
        store = open_store(directory, kind, snapshots=EVERY_TURN)
        whole = await store.load(SESSION)
        tail = await store.load_tail(SESSION)
        kinds = [r.kind for r in whole.records]
        seen["snapshots"] += kinds.count("snapshot")
        seen["from a snapshot"] += tail.records[0].kind == "snapshot"
        # killed while a snapshot was written (its line torn, for JSONL)
        marks = (directory / "snapshots.log").read_text().split()
        seen["killed in a snapshot"] += bool(marks) and marks[-1] == "begin"
        seen["torn snapshot"] += whole.torn.startswith(b'{"kind":"snapshot"')
        assert whole.records[-len(tail.records) :] == tail.records, trial
        assert_same(derive(tail.records), derive(whole.records), trial)
        agent = await resume_when_free(
            store,
            kind,
            model=StepwiseModel(directory),
            tools=make_tools(directory),
            max_steps=STEPS + 1,
        )
        assert not any("whole ledger" in w for w in agent.resume_warnings), trial
        reruns = [call.id for call in agent.rerun_calls]
        result = await agent.prompt("continue")
        await agent.aclose()
        assert result.end == TurnCompleted() and result.final_text == "all done", trial
        check_effects(directory, result.messages, reruns, trial)
        again = await store.load(SESSION)
        assert_same(derive((await store.load_tail(SESSION)).records), derive(again.records), trial)
    # the trials stopped in a snapshot, at least: the others depend on the load
    stopped = len(range(0, SNAPSHOT_TRIALS[kind], 10))
    assert seen["killed"] >= stopped and seen["from a snapshot"] >= stopped, seen
    assert seen["killed in a snapshot"] >= stopped, seen
    if kind == "jsonl":
        assert seen["torn snapshot"] >= stopped, seen
    print(f"{kind} with snapshots: {dict(seen)}")


def assert_same(left, right, trial: int) -> None:
    for field in attrs.fields(type(left)):
        if field.name != "conversation":
            assert getattr(left, field.name) == getattr(right, field.name), (trial, field.name)


async def first_line(process: trio.Process) -> bytes:
    assert process.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await process.stdout.receive_some(1)
        assert chunk, f"the child exited early: {line!r}"
        line += chunk
    return line


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"], indirect=True)
async def test_two_processes_racing_to_resume_one_session_exactly_one_wins(tmp_path, kind):
    rng = random.Random(SEED + 1)
    for trial in range(RACES):
        directory = tmp_path / f"race-{trial}"
        directory.mkdir()
        await crash_once(directory, rng.uniform(0.0, 0.05), kind)  # left by a kill -9
        if kind == "postgres":  # the killed holder's lease (1 s) ends: both may race
            held = open_store(directory, kind)
            await wait_until_async(lambda: lease_ended(held, SESSION))  # noqa: B023 (awaited here)
            await held.aclose()
        before = dispatched(directory)
        racers = [
            await trio.lowlevel.open_process(
                [sys.executable, str(RACER), str(directory), kind],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        try:
            with trio.fail_after(WAIT):  # two processes start and race: seconds each, loaded
                lines = [await first_line(racer) for racer in racers]
                [winner] = [r for r, line in zip(racers, lines, strict=True) if line[:3] == b"won"]
                [(loser, lost)] = [
                    (r, line) for r, line in zip(racers, lines, strict=True) if r is not winner
                ]
                # the loser was refused at once, told which process holds the session
                assert lost.startswith(b"locked: "), lost
                if kind == "postgres":  # the lease's holder: host and pid
                    assert f":{winner.pid}' holds the lease".encode() in lost, lost
                else:
                    assert f"process {winner.pid} on ".encode() in lost, lost
                assert await loser.wait() == 3
                # the winner goes on, and is killed at a random moment
                assert winner.stdin is not None
                await winner.stdin.send_all(b"go\n")
                await trio.sleep(rng.uniform(0.0, 0.06))
        finally:
            for racer in racers:
                racer.kill()
                await racer.wait()
                await racer.stdout.aclose()
                await racer.stdin.aclose()
        # the kernel let the dead winner's lock go (its lease ends): the session
        # loads and resumes here
        store = open_store(directory, kind)
        loaded = await store.load(SESSION)
        derive(loaded.records)
        agent = await resume_when_free(
            store,
            kind,
            model=StepwiseModel(directory),
            tools=make_tools(directory),
            max_steps=STEPS + 1,
        )
        result = await agent.prompt("continue")
        await agent.aclose()
        assert result.end == TurnCompleted(), (trial, result.end)
        after = dispatched(directory)
        assert after[: len(before)] == before
        check_effects(directory, result.messages, None, trial)
        sent = (directory / "requests.log").read_text().split()
        assert len(sent) == len(set(sent)), f"race {trial}: a request id was sent twice: {sent}"
